// The --metrics line: valid JSON whatever the loss (NaN and infinities as null), and the step it
// names read back, as a resumed run does when it keeps the file's earlier steps.
#include <catch2/catch.hpp>

#include <limits>

#include "merak/train/progress.h"

using merak::train::json_line;
using merak::train::json_line_step;
using merak::train::report;

TEST_CASE("the metrics line writes NaN and infinities as null", "[train]") {
  merak::train::StepStats s;
  s.step = 12;
  s.loss = -std::numeric_limits<double>::quiet_NaN();
  s.grad_norm = std::numeric_limits<double>::infinity();
  s.lr = 1e-3;
  s.seconds = 0.5;
  merak::train::EvalStats eval;
  eval.loss = std::numeric_limits<double>::quiet_NaN();
  eval.perplexity = std::numeric_limits<double>::infinity();
  merak::train::StepReport r = report(s, 100.0);
  r.eval = &eval;
  const std::string line = json_line(r);
  INFO(line);
  CHECK_THAT(line, Catch::StartsWith("{\"step\": 12, \"loss\": null, \"lr\": 0.001, "
                                     "\"grad_norm\": null, "));
  CHECK_THAT(line, Catch::EndsWith(", \"valid_loss\": null, \"valid_ppl\": null}"));
  CHECK_THAT(line, !Catch::Contains("nan") && !Catch::Contains("inf"));
  CHECK(json_line_step(line) == 12);
}

TEST_CASE("a metrics line's step is read back; anything else is not a metrics line", "[train]") {
  merak::train::StepStats s;
  s.step = 40;
  s.loss = 2.5;
  CHECK(json_line_step(json_line(report(s, 0))) == 40);
  CHECK_FALSE(json_line_step(""));
  CHECK_FALSE(json_line_step("hello"));
  CHECK_FALSE(json_line_step("{\"step\": 7, \"loss\": 1."));  // cut short by a crash
  CHECK_FALSE(json_line_step("{\"step\": x, \"loss\": 1}"));
  CHECK_FALSE(json_line_step("{\"step\": }"));
}
