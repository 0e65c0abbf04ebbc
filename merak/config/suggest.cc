#include "merak/config/suggest.h"

#include <algorithm>
#include <cctype>

namespace merak::config::detail {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "a.b" -> {"a", "b"}; "a" -> {"", "a"}.
std::pair<std::string, std::string> split_key(const std::string& key) {
  size_t dot = key.find('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

}  // namespace

int edit_distance(const std::string& a_in, const std::string& b_in) {
  const std::string a = lower(a_in), b = lower(b_in);
  const size_t n = a.size(), m = b.size();
  // d[i][j]: edits turning a[0, i) into b[0, j) (optimal string alignment).
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int substitute = d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

int typo_budget(const std::string& word) {
  if (word.size() <= 3) return 1;
  if (word.size() <= 7) return 2;
  return 3;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = typo_budget(word) + 1;
  for (const std::string& c : candidates) {
    int d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::string closest_key(const std::string& key, const std::vector<std::string>& known_keys,
                        const std::vector<std::string>& sections) {
  auto [section, name] = split_key(key);
  std::string best;
  int best_cost = typo_budget(name) + 1;
  for (const std::string& known : known_keys) {
    auto [known_section, known_name] = split_key(known);
    int cost = edit_distance(name, known_name) + (section == known_section ? 0 : 1);
    if (cost < best_cost) best = known, best_cost = cost;
  }
  if (section.empty()) {
    // A bare name: a misspelt section ("optimiser") beats a key found in some section.
    std::string s = closest(name, sections);
    if (!s.empty() && edit_distance(name, s) <= best_cost) return s;
  }
  return best;
}

}  // namespace merak::config::detail
