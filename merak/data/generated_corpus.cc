// The generated default corpus: sentences from a small English-like grammar, as byte tokens.
// Word choice is random but the bytes within and between words are highly predictable
// (spelling, agreement, fixed phrases), so a small byte-level model learns it in minutes.
#include <cctype>

#include "merak/core/philox.h"
#include "merak/data/dataset.h"

namespace merak::data {
namespace {

struct Word {
  const char* singular;
  const char* plural;
};

// Nouns and verbs carry both numbers so subjects and verbs agree.
const std::vector<Word> kNouns = {
    {"cat", "cats"},         {"dog", "dogs"},         {"bird", "birds"},
    {"fox", "foxes"},        {"child", "children"},   {"farmer", "farmers"},
    {"teacher", "teachers"}, {"king", "kings"},       {"owl", "owls"},
    {"horse", "horses"},     {"robot", "robots"},     {"elephant", "elephants"}};
const std::vector<Word> kTransitive = {
    {"sees", "see"},       {"likes", "like"},   {"follows", "follow"}, {"finds", "find"},
    {"helps", "help"},     {"watches", "watch"}, {"chases", "chase"},  {"feeds", "feed"}};
const std::vector<Word> kIntransitive = {
    {"sleeps", "sleep"}, {"runs", "run"}, {"sings", "sing"}, {"waits", "wait"},
    {"smiles", "smile"}};
const std::vector<Word> kDeterminers = {
    {"the", "the"}, {"a", "some"}, {"one", "two"}, {"this", "these"}, {"every", "many"}};
const std::vector<const char*> kAdjectives = {"small", "big",   "old",   "young", "quick",
                                              "lazy",  "happy", "quiet", "brave", "clever",
                                              "red",   "angry"};
const std::vector<const char*> kAdverbs = {"quietly", "quickly", "again", "all day",
                                           "at night"};
// Recurring phrases: openers, places and whole fixed sentences.
const std::vector<const char*> kOpeners = {"once upon a time, ", "in the morning, ",
                                           "every day, ", "after the rain, "};
const std::vector<const char*> kPlaces = {"in the garden", "near the old river",
                                          "under the big tree", "at the market", "on the hill"};
const std::vector<const char*> kSayings = {"and they all lived happily ever after",
                                           "the end", "nobody knows why"};

// Philox draws in sequence: draw n is philox_at(key, n).
class Draws {
 public:
  explicit Draws(uint64_t key) : key_(key) {}
  uint32_t next() { return philox_at(key_, n_++)[0]; }
  size_t pick(size_t n) { return next() % n; }
  bool chance(double p) { return uniform01(next()) < p; }

 private:
  uint64_t key_;
  uint64_t n_ = 0;
};

bool starts_with_vowel(const std::string& w) {
  return !w.empty() && std::string("aeiou").find(w[0]) != std::string::npos;
}

// determiner [adjective] noun, singular or plural; "a" becomes "an" before a vowel.
std::string noun_phrase(Draws& d, bool plural) {
  std::string det = plural ? kDeterminers[d.pick(kDeterminers.size())].plural
                           : kDeterminers[d.pick(kDeterminers.size())].singular;
  std::string rest;
  if (d.chance(0.4)) rest = std::string(kAdjectives[d.pick(kAdjectives.size())]) + " ";
  const Word& noun = kNouns[d.pick(kNouns.size())];
  rest += plural ? noun.plural : noun.singular;
  if (det == "a" && starts_with_vowel(rest)) det = "an";
  return det + " " + rest;
}

// subject verb (object | [adverb]), the verb agreeing with the subject.
std::string clause(Draws& d) {
  const bool plural = d.chance(0.5);
  std::string s = noun_phrase(d, plural) + " ";
  if (d.chance(0.6)) {
    const Word& verb = kTransitive[d.pick(kTransitive.size())];
    s += std::string(plural ? verb.plural : verb.singular) + " " + noun_phrase(d, d.chance(0.5));
  } else {
    const Word& verb = kIntransitive[d.pick(kIntransitive.size())];
    s += plural ? verb.plural : verb.singular;
    if (d.chance(0.5)) s += std::string(" ") + kAdverbs[d.pick(kAdverbs.size())];
  }
  return s;
}

std::string sentence(Draws& d) {
  std::string s;
  if (d.chance(0.04)) {
    s = kSayings[d.pick(kSayings.size())];
  } else {
    if (d.chance(0.25)) s = kOpeners[d.pick(kOpeners.size())];
    s += clause(d);
    if (d.chance(0.3)) s += std::string(" ") + kPlaces[d.pick(kPlaces.size())];
    if (d.chance(0.15)) s += ", and " + clause(d);
  }
  s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
  s += d.chance(0.9) ? "." : "!";
  return s;
}

}  // namespace

std::unique_ptr<TokenDataset> generated_corpus(int64_t tokens, uint64_t seed) {
  MERAK_CHECK(tokens > 0, "generated_corpus: token count must be positive, got ", tokens);
  Draws d(philox_key(seed, "merak.data.generated_corpus"));
  std::string text;
  text.reserve(size_t(tokens) + 256);
  while (int64_t(text.size()) < tokens) {
    text += sentence(d);
    text += d.chance(0.2) ? "\n" : " ";  // paragraphs of about five sentences
  }
  text.resize(size_t(tokens));
  return in_memory(tokenize_bytes(text), 256, "the generated corpus");
}

}  // namespace merak::data
