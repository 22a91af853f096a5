// Golden tests of the simplifier on whole kernels: each case in golden/simplify.txt is an
// input kernel, a `# expect:` line and the expected output, cases separated by `# -----`.
#include <gtest/gtest.h>

#include <sstream>

#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/verifier.h"
#include "test_util.h"

namespace ember::loop {
namespace {

struct Case {
  std::string input, expected;
};

std::vector<Case> read_cases(const std::string& text) {
  std::vector<Case> cases(1);
  bool in_expect = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# -----", 0) == 0) {
      cases.emplace_back();
      in_expect = false;
    } else if (line.rfind("# expect:", 0) == 0) {
      in_expect = true;
    } else if (line.rfind("#", 0) != 0) {
      (in_expect ? cases.back().expected : cases.back().input) += line + "\n";
    }
  }
  return cases;
}

TEST(SimplifyGolden, MatchesExpectedKernels) {
  std::vector<Case> cases = read_cases(testing::read_golden("simplify.txt"));
  ASSERT_GE(cases.size(), 3u);
  for (const Case& c : cases) {
    Kernel in = parse_kernel(c.input);
    ASSERT_EQ(verify_kernel(in), std::vector<std::string>{}) << c.input;
    Kernel out = simplify(in);
    EXPECT_EQ(verify_kernel(out), std::vector<std::string>{});
    EXPECT_EQ(print_kernel(out), c.expected) << "input:\n" << c.input;
    EXPECT_EQ(print_kernel(simplify(out)), print_kernel(out)) << "not idempotent";
  }
}

}  // namespace
}  // namespace ember::loop
