// "Did you mean ...?" for misspelt keys and values.
#pragma once

#include <string>
#include <vector>

namespace merak::config::detail {

// Edit distance, case-insensitive, where swapping two neighbouring letters counts as one edit.
int edit_distance(const std::string& a, const std::string& b);

// How many edits a misspelling of `word` may plausibly hold: 1 for short words, up to 3.
int typo_budget(const std::string& word);

// The candidate closest to `word` within typo_budget(word), or "" if none is that close.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

// The known key closest to an unknown `key` ("optimizer.lrr", "optimiser.lr", "lr"), or "":
// a key of the same section with a similar name, else a similar name in another section
// (which costs one more edit), else, for an undotted name, a similar section.
std::string closest_key(const std::string& key, const std::vector<std::string>& known_keys,
                        const std::vector<std::string>& sections);

}  // namespace merak::config::detail
