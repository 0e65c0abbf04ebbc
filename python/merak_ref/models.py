"""GPT-2 and BERT in plain PyTorch, with Merak's parameter names so weights load by name.

Written from the architecture description (models/gpt.h, models/bert.h), not from Merak's code:
  * attention projects with one fused qkv Linear [3C, C] whose output rows are q, then k, then v,
    each of them head-major (head h owns rows h*D .. h*D + D - 1);
  * GPT: token + position embeddings, pre-LN blocks with causal attention and a GELU-tanh MLP,
    a final LayerNorm, the LM head tied to the token embedding;
  * BERT: word + position + segment embeddings, LayerNorm, post-LN layers with bidirectional
    attention under a key padding mask and an exact-GELU MLP, the MLM head (dense, GELU,
    LayerNorm, decoder tied to the word embedding plus its own bias) and the NSP head (tanh
    pooler on position 0, 2-way classifier); loss = MLM + NSP cross-entropy.
Dropout (rate `dropout`, 0 by default) sits where Merak's models have it: after the embeddings,
on the attention probabilities, on each block's attention and MLP outputs before the residual
add. At rate 0 there is no dropout node at all, so exports for parity runs are unchanged.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def drop(x, p, training):
    return F.dropout(x, p, training) if p > 0 else x


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads, causal, dropout=0.0):
        super().__init__()
        assert hidden % heads == 0
        self.heads, self.causal, self.dropout = heads, causal, dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x, key_padding_mask=None):
        b, t, c = x.shape
        h = self.heads
        d = c // h
        # [B, T, 3C] -> [3, B, H, T, D]
        q, k, v = self.qkv(x).view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)  # [B, H, T, T]
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if key_padding_mask is not None:  # bool [B, T], True = attend
            scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
        out = drop(scores.softmax(-1), self.dropout, self.training) @ v  # [B, H, T, D]
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class Mlp(nn.Module):
    def __init__(self, hidden, ffn, approximate):
        super().__init__()
        self.fc = nn.Linear(hidden, ffn)
        self.proj = nn.Linear(ffn, hidden)
        self.approximate = approximate

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class PreLnBlock(nn.Module):
    def __init__(self, hidden, heads, ffn, eps, dropout=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = SelfAttention(hidden, heads, causal=True, dropout=dropout)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = Mlp(hidden, ffn, "tanh")
        self.dropout = dropout

    def forward(self, x):
        x = x + drop(self.attn(self.ln_1(x)), self.dropout, self.training)
        return x + drop(self.mlp(self.ln_2(x)), self.dropout, self.training)


class PostLnLayer(nn.Module):
    def __init__(self, hidden, heads, ffn, eps, dropout=0.0):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, causal=False, dropout=dropout)
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = Mlp(hidden, ffn, "none")
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.dropout = dropout

    def forward(self, x, key_padding_mask):
        x = self.ln_1(x + drop(self.attn(x, key_padding_mask), self.dropout, self.training))
        return self.ln_2(x + drop(self.mlp(x), self.dropout, self.training))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, max_seq, vocab, ffn=0, eps=1e-5, dropout=0.0):
        super().__init__()
        ffn = ffn or 4 * hidden
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_seq, hidden)
        self.blocks = nn.ModuleList(
            PreLnBlock(hidden, heads, ffn, eps, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        self.dropout = dropout

    def logits(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        x = drop(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied LM head

    def loss(self, tokens, targets):
        logits = self.logits(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Bert(nn.Module):
    def __init__(self, layers, hidden, heads, max_seq, vocab, type_vocab=2, ffn=0, eps=1e-5,
                 dropout=0.0):
        super().__init__()
        ffn = ffn or 4 * hidden
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_seq, hidden)
        self.segment = nn.Embedding(type_vocab, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            PostLnLayer(hidden, heads, ffn, eps, dropout) for _ in range(layers))
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_ln = nn.LayerNorm(hidden, eps=eps)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)
        self.dropout = dropout

    def encode(self, tokens, segment_ids, attention_mask):
        t = tokens.shape[1]
        x = self.word(tokens) + self.position(torch.arange(t, device=tokens.device))
        x = drop(self.emb_ln(x + self.segment(segment_ids)), self.dropout, self.training)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x

    def heads(self, tokens, segment_ids, attention_mask):
        """The MLM logits [B, T, vocab] and the NSP logits [B, 2]."""
        h = self.encode(tokens, segment_ids, attention_mask)
        m = self.mlm_ln(F.gelu(self.mlm_dense(h)))
        mlm_logits = m @ self.word.weight.t() + self.mlm_bias  # decoder tied to the embedding
        return mlm_logits, self.nsp(torch.tanh(self.pooler(h[:, 0])))

    def loss(self, tokens, segment_ids, attention_mask, mlm_targets, nsp_labels):
        mlm_logits, nsp_logits = self.heads(tokens, segment_ids, attention_mask)
        mlm = F.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]),
                              mlm_targets.reshape(-1), ignore_index=-100)
        return mlm + F.cross_entropy(nsp_logits, nsp_labels)


# The networks as an ONNX export sees them: the outputs the loss takes, not the loss (a trainer
# importing them appends its own).
class GptLogits(Gpt):
    def forward(self, tokens):
        return self.logits(tokens)


class BertHeads(Bert):
    def forward(self, tokens, segment_ids, attention_mask):
        return self.heads(tokens, segment_ids, attention_mask)


def init_gpt2(model, std=0.02, layers=None):
    """GPT-2's initialisation (as Merak's): every matrix and embedding N(0, std), the residual
    output projections N(0, std / sqrt(2 * layers)), biases 0, LayerNorm weights 1. PyTorch's
    defaults (N(0, 1) embeddings) would start training from huge logits."""
    layers = layers or len(getattr(model, "blocks", getattr(model, "layers", [])))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                residual = name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight")
                p.normal_(0.0, std / math.sqrt(2 * layers) if residual else std)
            elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                    name.endswith("ln_f.weight") or name.endswith("_ln.weight"):
                p.fill_(1.0)
            else:
                p.zero_()
    return model


def decay_groups(model, weight_decay):
    """AdamW parameter groups: decay for tensors of rank >= 2 (matrices, embeddings), none for
    biases and norm weights."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def scheduled_lr(step, total_steps, lr, warmup_steps, decay, min_lr):
    """Linear warmup from lr/warmup to lr over warmup_steps, then cosine, linear or constant
    decay to min_lr at total_steps. step is 0-based."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if decay == "constant":
        return lr
    p = min(1.0, max(0.0, (step - warmup_steps) / max(1, total_steps - warmup_steps)))
    if decay == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))
    return lr + (min_lr - lr) * p
