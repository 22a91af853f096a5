// Randomized checks of the builders, simplify, ranges, queries, substitution and the text form
// against a reference evaluator that knows none of the rules: random expression trees over three
// symbols, each checked at bindings inside the symbols' ranges (negative values included).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "sym/eval.h"
#include "sym/parser.h"
#include "sym/query.h"
#include "sym/simplify.h"
#include "sym_test_util.h"

namespace ember::sym {
namespace {

enum class Op { Const, Sym, Add, Sub, Mul, FloorDiv, Mod, Min, Max };

/// An expression as written, before any rule.
struct Tree {
  Op op = Op::Const;
  int64_t value = 0;  ///< Const: the value; Sym: the symbol id
  std::shared_ptr<const Tree> a, b;
};
using TreePtr = std::shared_ptr<const Tree>;

TreePtr node(Op op, int64_t value, TreePtr a = nullptr, TreePtr b = nullptr) {
  return std::make_shared<const Tree>(Tree{op, value, std::move(a), std::move(b)});
}

/// Python semantics, written independently of src/sym (through double: values are small).
int64_t py_floordiv(int64_t x, int64_t d) {
  return static_cast<int64_t>(std::floor(static_cast<double>(x) / static_cast<double>(d)));
}
int64_t py_mod(int64_t x, int64_t d) {
  return x - d * py_floordiv(x, d);
}

int64_t reference(const Tree& t, const Bindings& b) {
  switch (t.op) {
    case Op::Const:
      return t.value;
    case Op::Sym:
      return b.at(static_cast<SymbolId>(t.value));
    default:
      break;
  }
  int64_t x = reference(*t.a, b), y = reference(*t.b, b);
  switch (t.op) {
    case Op::Add:
      return x + y;
    case Op::Sub:
      return x - y;
    case Op::Mul:
      return x * y;
    case Op::FloorDiv:
      return py_floordiv(x, y);
    case Op::Mod:
      return py_mod(x, y);
    case Op::Min:
      return std::min(x, y);
    default:
      return std::max(x, y);
  }
}

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t range(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }

  TreePtr leaf() { return pick(2) == 0 ? node(Op::Const, range(-6, 6)) : node(Op::Sym, pick(3)); }

  /// A divisor that is never 0 in the ranges: a nonzero constant, s0, s1, s1 + 1, max(e, 1).
  TreePtr divisor(int depth) {
    switch (pick(5)) {
      case 0:
        return node(Op::Sym, 0);
      case 1:
        return node(Op::Sym, 1);
      case 2:
        return node(Op::Add, 0, node(Op::Sym, 1), node(Op::Const, 1));
      case 3:
        return node(Op::Max, 0, tree(depth - 1), node(Op::Const, 1));
      default: {
        int64_t d = range(-4, 6);
        return node(Op::Const, d == 0 ? 8 : d);
      }
    }
  }

  TreePtr tree(int depth) {
    if (depth <= 0 || pick(5) == 0) return leaf();
    TreePtr a = tree(depth - 1);
    switch (pick(9)) {
      case 0:
      case 1:
        return node(Op::Add, 0, a, tree(depth - 1));
      case 2:
        return node(Op::Sub, 0, a, tree(depth - 1));
      case 3:
        // Products of two subtrees only near the leaves, so values stay small.
        return node(Op::Mul, 0, a, depth <= 2 ? tree(depth - 1) : node(Op::Const, range(-3, 4)));
      case 4:
        return node(Op::FloorDiv, 0, a, divisor(depth));
      case 5:
        return node(Op::Mod, 0, a, divisor(depth));
      case 6:
        return node(Op::Min, 0, a, tree(depth - 1));
      case 7:
        return node(Op::Max, 0, a, tree(depth - 1));
      default:
        // A multiple of a divisor plus a rest, the shape the division rules look for.
        return node(Op::Add, 0, node(Op::Mul, 0, a, node(Op::Const, range(2, 4))), leaf());
    }
  }

 private:
  std::mt19937 rng_;
};

class SymProperty : public ::testing::Test {
 protected:
  ShapeEnv env;
  // s1 is unbounded above, so that infinite bounds take part; the bindings stop at 4.
  SymExpr s[3] = {env.create_symbol(3, "a", {2, 5}), env.create_symbol(2, "b", Range::at_least(1)),
                  env.create_symbol(0, "c", {-3, 3})};

  SymExpr build(const Tree& t) const {
    switch (t.op) {
      case Op::Const:
        return t.value;
      case Op::Sym:
        return s[t.value];
      default:
        break;
    }
    SymExpr x = build(*t.a), y = build(*t.b);
    switch (t.op) {
      case Op::Add:
        return x + y;
      case Op::Sub:
        return x - y;
      case Op::Mul:
        return x * y;
      case Op::FloorDiv:
        return floordiv(x, y);
      case Op::Mod:
        return mod(x, y);
      case Op::Min:
        return min(x, y);
      default:
        return max(x, y);
    }
  }

  /// Bindings inside the ranges: 4 * 4 * 7 of them (s1 from 1 to 4).
  std::vector<Bindings> all_bindings() const {
    std::vector<Bindings> out;
    for (int64_t a = 2; a <= 5; ++a) {
      for (int64_t b = 1; b <= 4; ++b) {
        for (int64_t c = -3; c <= 3; ++c) out.push_back({{0, a}, {1, b}, {2, c}});
      }
    }
    return out;
  }
};

constexpr int kTrees = 1500;

TEST_F(SymProperty, BuildersAndSimplifyKeepTheValue) {
  Generator gen(1234);
  std::vector<Bindings> bindings = all_bindings();
  int simplified = 0;
  for (int i = 0; i < kTrees; ++i) {
    TreePtr t = gen.tree(4);
    SymExpr e = build(*t);
    SymExpr simple = simplify(e, env);
    if (simple != e) ++simplified;
    ASSERT_EQ(simplify(simple, env), simple) << "not idempotent: " << e << " -> " << simple;
    Range r = range_of(e, env);
    Range rs = range_of(simple, env);
    for (const Bindings& b : bindings) {
      int64_t want = reference(*t, b);
      ASSERT_EQ(evaluate(e, b), want)
          << e << " at s0=" << b.at(0) << " s1=" << b.at(1) << " s2=" << b.at(2);
      ASSERT_EQ(evaluate(simple, b), want)
          << e << " simplified to " << simple << " at s0=" << b.at(0) << " s1=" << b.at(1)
          << " s2=" << b.at(2);
      ASSERT_TRUE(r.contains(want)) << e << " has range " << r.str() << " without " << want;
      ASSERT_TRUE(rs.contains(want)) << simple << " has range " << rs.str() << " without " << want;
    }
  }
  EXPECT_GT(simplified, kTrees / 20);  // the range rules are exercised
}

TEST_F(SymProperty, PrintedFormsParseBack) {
  Generator gen(99);
  for (int i = 0; i < kTrees; ++i) {
    SymExpr e = build(*gen.tree(4));
    for (const SymExpr& x : {e, simplify(e, env)}) {
      std::string text = print(x);
      SymExpr back = parse(text, env);
      ASSERT_EQ(back, x) << text << " parsed as " << back;
      ASSERT_EQ(print(back), text);
      ASSERT_EQ(back.hash(), x.hash());
    }
  }
}

TEST_F(SymProperty, StaticallyKnownAnswersAreSound) {
  Generator gen(7);
  std::vector<Bindings> bindings = all_bindings();
  const Rel rels[] = {Rel::EQ, Rel::NE, Rel::LT, Rel::LE, Rel::GT, Rel::GE};
  auto holds = [](Rel rel, int64_t x, int64_t y) {
    switch (rel) {
      case Rel::EQ:
        return x == y;
      case Rel::NE:
        return x != y;
      case Rel::LT:
        return x < y;
      case Rel::LE:
        return x <= y;
      case Rel::GT:
        return x > y;
      default:
        return x >= y;
    }
  };
  int known = 0;
  for (int i = 0; i < kTrees; ++i) {
    TreePtr ta = gen.tree(3);
    // Often compare with a near relative, so that some answers are known.
    TreePtr tb =
        gen.pick(2) == 0 ? gen.tree(3) : node(Op::Add, 0, ta, node(Op::Const, gen.range(-2, 2)));
    SymExpr a = build(*ta), b = build(*tb);
    for (Rel rel : rels) {
      if (!statically_known_true(a, rel, b, env)) continue;
      ++known;
      for (const Bindings& v : bindings) {
        ASSERT_TRUE(holds(rel, reference(*ta, v), reference(*tb, v)))
            << a << " " << rel_name(rel) << " " << b << " claimed known";
      }
    }
    for (int64_t k : {2, 3, -4}) {
      if (!statically_known_multiple_of(a, k, env)) continue;
      ++known;
      for (const Bindings& v : bindings) {
        ASSERT_EQ(py_mod(reference(*ta, v), k), 0) << a << " claimed a multiple of " << k;
      }
    }
  }
  EXPECT_GT(known, kTrees / 4);
}

TEST_F(SymProperty, SubstitutionMatchesEvaluation) {
  Generator gen(42);
  std::vector<Bindings> bindings = all_bindings();
  // s0 := s1 + 2 (still >= 3, so divisors stay nonzero), s2 := s2 * 2 - 1.
  std::map<SymbolId, SymExpr> replacements{{0, s[1] + 2}, {2, s[2] * 2 - 1}};
  for (int i = 0; i < kTrees; ++i) {
    TreePtr t = gen.tree(4);
    SymExpr e = substitute(build(*t), replacements);
    for (const Bindings& b : bindings) {
      Bindings moved{{0, b.at(1) + 2}, {1, b.at(1)}, {2, b.at(2) * 2 - 1}};
      ASSERT_EQ(evaluate(e, b), reference(*t, moved)) << e;
    }
  }
}

}  // namespace
}  // namespace ember::sym
