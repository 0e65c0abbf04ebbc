#include "merak/config/config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "merak/config/fields.h"
#include "merak/config/suggest.h"
#include "merak/config/validate.h"
#include "merak/config/value.h"
#include "merak/core/read_file.h"

namespace merak::config {

const std::vector<std::string> kAutoKeys = {
    "parallel.dp",       "parallel.pp",
    "parallel.tp",       "train.micro_batch",
    "parallel.schedule", "parallel.virtual_stages",
    "parallel.recompute", "parallel.zero1"};

namespace {

bool is_auto_key(const std::string& key) {
  for (const std::string& k : kAutoKeys)
    if (k == key) return true;
  return false;
}

bool says_auto(const YAML::Node& value) { return value.IsScalar() && value.Scalar() == "auto"; }

using detail::Field;

std::string read_config_file(const std::string& path) {
  std::string text, why;
  if (!merak::read_file(path, &text, &why))
    throw ConfigError(path + ": cannot read config file (" + why + ")");
  return text;
}

// "line 3, column 7: " (1-based), or "" where yaml-cpp knows no position.
std::string position(const YAML::Mark& mark) {
  if (mark.is_null()) return "";
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1) +
         ": ";
}

// Where each document of a YAML stream starts: the mark of its first node. Builds nothing.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;

  void OnDocumentStart(const YAML::Mark&) override { first_ = true; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (first_) marks.push_back(mark);
    first_ = false;
  }
  bool first_ = false;
};

bool is_section(const std::string& name) {
  for (const std::string& s : detail::section_names()) {
    if (s == name) return true;
  }
  return false;
}

std::string trim(const std::string& s) {
  const char* space = " \t";
  size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

// Builds one Config from a document and overrides. It remembers which keys --set gave, so a
// value that breaks a rule is reported where the user wrote it: "key 'a.b'" or "--set a.b".
class Builder {
 public:
  explicit Builder(const std::string& name) : fields_(detail::fields_of(config_)) {
    config_.path = name;
  }
  Builder(const Builder&) = delete;  // fields_ point into config_
  Builder& operator=(const Builder&) = delete;

  void read_document(const YAML::Node& root) {
    if (root.IsNull()) return;  // an empty file: every default
    if (!root.IsMap()) {
      fail("expected a map of sections (model, data, optimizer, schedule, train, parallel), "
           "got " + detail::describe(root));
    }
    std::map<std::string, int> lines;  // key -> line it was given on, to catch repeats
    for (const auto& entry : root) {
      const std::string section = name_of(entry.first, "");
      if (!is_section(section)) fail_at("key '" + section + "'", unknown(section));
      note_line(section, entry.first, &lines);
      const YAML::Node& body = entry.second;
      if (body.IsNull()) continue;  // a section with every key commented out
      if (section == "parallel" && says_auto(body)) {
        all_auto();
        continue;
      }
      if (!body.IsMap()) {
        fail_at("key '" + section + "'", "expected a map of keys, got " + detail::describe(body));
      }
      read_keys(section, body, &lines);
    }
  }

  // `flag`: the tool's flag that gave the assignment, named in messages; "" for --set.
  void apply_override(const std::string& assignment, const std::string& flag = "") {
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos) {
      fail_at("--set " + trim(assignment), "expected KEY=VALUE, like optimizer.lr=3e-4");
    }
    const std::string key = trim(assignment.substr(0, eq));
    const std::string text = assignment.substr(eq + 1);
    const std::string where = flag.empty() ? "--set " + key : flag;
    const Field* field = find(key);
    if (key == "parallel" && trim(text) == "auto") {
      all_auto();
      return;
    }
    if (field == nullptr) {
      if (is_section(key)) {
        fail_at(where, "names a section; set one key of it, like " + first_key_under(key));
      }
      if (is_group(key)) {
        fail_at(where, "names a group of keys; set one of them, like " + first_key_under(key));
      }
      fail_at(where, unknown(key));
    }
    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail_at(where, "cannot read " + detail::quote(text) + " as YAML: " + e.msg);
    }
    // `--set checkpoint.dir=""` reaches us without its quotes (the shell takes them): nothing
    // after '=' sets a string key to the empty string (other types still want a value).
    if (trim(text).empty() && std::holds_alternative<std::string*>(field->target))
      value = YAML::Node(std::string());
    if (is_auto_key(key)) set_auto(key, says_auto(value));
    if (!says_auto(value) || !is_auto_key(key)) {
      std::string error = detail::assign(value, field->target);
      if (!error.empty()) fail_at(where, error);
    }
    overridden_[key] = where;
  }

  Config finish() const {
    if (auto problem = detail::first_problem(config_)) {
      const std::string& key = problem->key;
      auto given = overridden_.find(key);
      fail_at(given != overridden_.end() ? given->second : "key '" + key + "'", problem->message);
    }
    return config_;
  }

 private:
  // The keys of a section's map (prefix "train") or of a group's map ("train.loss_scale").
  void read_keys(const std::string& prefix, const YAML::Node& body,
                 std::map<std::string, int>* lines) {
    for (const auto& item : body) {
      const std::string key = prefix + "." + name_of(item.first, prefix);
      const Field* field = find(key);
      const bool group = field == nullptr && is_group(key);
      if (field == nullptr && !group) fail_at("key '" + key + "'", unknown(key));
      note_line(key, item.first, lines);
      if (group) {
        if (item.second.IsNull()) continue;  // every key of the group commented out
        if (!item.second.IsMap()) {
          fail_at("key '" + key + "'", "expected a map of keys (" + names_under(key) +
                                           "), got " + detail::describe(item.second));
        }
        read_keys(key, item.second, lines);
        continue;
      }
      if (is_auto_key(key)) {
        set_auto(key, says_auto(item.second));
        if (says_auto(item.second)) continue;
      }
      std::string error = detail::assign(item.second, field->target);
      if (!error.empty()) fail_at("key '" + key + "'", error);
    }
  }

  // `parallel: auto`: every layout key not given a value (in the file, before or after it, or
  // by --set) goes to the search; one given keeps its value whatever the order.
  void all_auto() {
    for (const std::string& k : kAutoKeys)
      if (!given_.count(k)) set_auto(k, true);
  }

  // Marks `key` for the layout search, or (a value given for it) fixes it.
  void set_auto(const std::string& key, bool on) {
    if (!on) given_.insert(key);
    std::vector<std::string> keys;
    for (const std::string& k : kAutoKeys) {
      const bool was = std::find(config_.parallel.auto_keys.begin(),
                                 config_.parallel.auto_keys.end(),
                                 k) != config_.parallel.auto_keys.end();
      if (k == key ? on : was) keys.push_back(k);
    }
    config_.parallel.auto_keys = keys;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(config_.path + ": " + what);
  }
  [[noreturn]] void fail_at(const std::string& where, const std::string& what) const {
    fail(where + ": " + what);
  }

  // A map key as text; keys that are lists or maps ("[a]: 1") are not names.
  std::string name_of(const YAML::Node& key, const std::string& section) const {
    if (!key.IsScalar()) {
      fail(position(key.Mark()) + "expected a key name" +
           (section.empty() ? "" : " in section '" + section + "'") + ", got " +
           detail::describe(key));
    }
    return key.Scalar();
  }

  // yaml-cpp keeps both entries of a repeated key; the second would silently win.
  void note_line(const std::string& key, const YAML::Node& node,
                 std::map<std::string, int>* lines) const {
    const int line = node.Mark().is_null() ? 0 : node.Mark().line + 1;
    auto [it, fresh] = lines->emplace(key, line);
    if (!fresh) {
      fail_at("key '" + key + "'", "given twice (lines " + std::to_string(it->second) + " and " +
                                       std::to_string(line) + ")");
    }
  }

  const Field* find(const std::string& key) const {
    for (const Field& f : fields_) {
      if (f.key() == key) return &f;
    }
    return nullptr;
  }

  // "train.loss_scale": the prefix of grouped keys (a section is not a group).
  bool is_group(const std::string& key) const {
    for (const Field& f : fields_) {
      if (!f.group().empty() && f.group() == key) return true;
    }
    return false;
  }

  std::string first_key_under(const std::string& prefix) const {
    for (const Field& f : fields_) {
      if (f.key().rfind(prefix + ".", 0) == 0) return f.key();
    }
    return "";
  }

  // "mode, initial, growth": the names a group's map holds.
  std::string names_under(const std::string& group) const {
    std::string names;
    for (const Field& f : fields_) {
      if (f.group() == group) {
        names += (names.empty() ? "" : ", ") + f.key().substr(group.size() + 1);
      }
    }
    return names;
  }

  std::string unknown(const std::string& key) const {
    // Keys that existed once and now live elsewhere: say where.
    if (key == "model.recompute")
      return "no longer a model key: recomputation is chosen by parallel.recompute (none, full, "
             "memory, ratio)";
    std::vector<std::string> keys;
    std::string group;
    for (const Field& f : fields_) {
      // A misspelt group name is matched against the group's own name too.
      if (!f.group().empty() && f.group() != group) keys.push_back(group = f.group());
      keys.push_back(f.key());
    }
    std::string guess = detail::closest_key(key, keys, detail::section_names());
    return guess.empty() ? "unknown key" : "unknown key (did you mean '" + guess + "'?)";
  }

  Config config_;
  std::vector<Field> fields_;
  std::map<std::string, std::string> overridden_;  // key -> where the last override of it was
  std::set<std::string> given_;  // layout keys given a value, never left to `parallel: auto`
};

}  // namespace

Config parse(const std::string& yaml_text, const std::string& name,
             const std::vector<std::string>& overrides, const FlagOverrides& flag_overrides) {
  // Not YAML::LoadAll: after a stray ',' ("[a], b", ",") yaml-cpp 0.7 makes empty documents
  // without moving on, and LoadAll collects them until memory runs out. The events of at most
  // two documents tell whether there is a second; YAML::Load builds the first.
  YAML::Node document;
  bool any = false;
  try {
    std::istringstream in(yaml_text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    any = parser.HandleNextDocument(starts);
    if (any && parser.HandleNextDocument(starts)) {
      const YAML::Mark second =
          starts.marks.size() > 1 ? starts.marks[1] : YAML::Mark::null_mark();
      if (second.pos >= 0 && size_t(second.pos) < yaml_text.size() &&
          yaml_text[size_t(second.pos)] == ',')
        throw YamlSyntaxError(name + ": " + position(second) + "YAML syntax error: unexpected ','");
      throw ConfigError(name + ": " + position(second) +
                        "a second YAML document starts here (a config file holds one)");
    }
    if (any) document = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw YamlSyntaxError(name + ": " + position(e.mark) + "YAML syntax error: " + e.msg);
  }
  Builder builder(name);
  if (any) builder.read_document(document);
  for (const std::string& assignment : overrides) builder.apply_override(assignment);
  for (const auto& [flag, assignment] : flag_overrides) builder.apply_override(assignment, flag);
  return builder.finish();
}

int64_t micro_batch_size(const Config& c) {
  if (c.parallel.micro_batches > 0) return c.train.batch / c.parallel.dp / c.parallel.micro_batches;
  return c.train.micro_batch > 0 ? c.train.micro_batch : c.train.batch / c.parallel.dp;
}

int64_t micro_batches_per_replica(const Config& c) {
  return c.train.batch / c.parallel.dp / micro_batch_size(c);
}

int64_t model_micro_batch_size(const Config& c) {
  return micro_batch_size(c) / (c.parallel.tp_subpipeline ? 2 : 1);
}

int64_t model_micro_batches_per_replica(const Config& c) {
  return micro_batches_per_replica(c) * (c.parallel.tp_subpipeline ? 2 : 1);
}

Config load(const std::string& path, const std::vector<std::string>& overrides,
            const FlagOverrides& flag_overrides) {
  return parse(read_config_file(path), path, overrides, flag_overrides);
}

std::string to_yaml(const Config& config) {
  Config copy = config;  // fields_of hands out pointers to mutable members
  const std::vector<Field> fields = detail::fields_of(copy);
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const std::string& section : detail::section_names()) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    std::string group;  // the group whose nested map is open, or ""
    for (const Field& f : fields) {
      if (f.section != section) continue;
      std::string name = f.name;
      if (f.group() != group) {
        if (!group.empty()) out << YAML::EndMap;
        group = f.group();
        if (!group.empty()) {
          out << YAML::Key << group.substr(section.size() + 1) << YAML::Value << YAML::BeginMap;
        }
      }
      if (!group.empty()) name = f.key().substr(group.size() + 1);
      out << YAML::Key << name << YAML::Value;
      detail::emit(out, f.target);
    }
    if (!group.empty()) out << YAML::EndMap;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!out.good()) throw ConfigError(config.path + ": cannot write YAML: " + out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

std::vector<KeyChange> model_changes(const Config& before, const Config& after) {
  Config a = before, b = after;  // fields_of hands out pointers to mutable members
  if (a.model.ffn_hidden != b.model.ffn_hidden) {  // 0 and 4 * hidden give the same width
    a.model.ffn_hidden = a.model.ffn();
    b.model.ffn_hidden = b.model.ffn();
  }
  const std::vector<Field> fa = detail::fields_of(a), fb = detail::fields_of(b);
  const auto text = [](const Field& f) {
    YAML::Emitter out;
    detail::emit(out, f.target);
    return std::string(out.c_str());
  };
  std::vector<KeyChange> changes;
  for (size_t i = 0; i < fa.size(); ++i) {
    const std::string& name = fa[i].name;
    if (fa[i].section != "model" || name == "init_from" || name == "init_std" ||
        name == "dropout" || name == "onnx")
      continue;
    const std::string x = text(fa[i]), y = text(fb[i]);
    if (x != y) changes.push_back({fa[i].key(), x, y});
  }
  return changes;
}

}  // namespace merak::config
