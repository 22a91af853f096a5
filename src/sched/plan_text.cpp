#include "sched/plan_text.h"

#include <charconv>
#include <sstream>
#include <vector>

#include "loop/equality.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "support/error.h"

namespace ember::sched {

namespace {

constexpr std::string_view kHeader = "ember-plan v1";

template <typename T>
void print_list(std::ostringstream& os, const char* name, const std::vector<T>& items) {
  os << name << ' ' << items.size();
  for (const T& v : items) os << ' ' << v;
  os << '\n';
}

char step_letter(PlanStep::Kind k) {
  switch (k) {
    case PlanStep::Kind::Extern:
      return 'E';
    case PlanStep::Kind::Kernel:
      return 'K';
    case PlanStep::Kind::View:
      return 'V';
  }
  return '?';
}

// Reads the text word by word; `take` returns the next byte run as is (a kernel's text).
class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  std::string_view word() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n')) ++pos_;
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ' ' && s_[pos_] != '\n') ++pos_;
    if (start == pos_) fail("unexpected end");
    return s_.substr(start, pos_ - start);
  }
  void expect(std::string_view w) {
    std::string_view got = word();
    if (got != w) fail("expected '" + std::string(w) + "', got '" + std::string(got) + "'");
  }
  int64_t integer() {
    std::string_view w = word();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
    if (ec != std::errc() || end != w.data() + w.size()) {
      fail("expected an integer, got '" + std::string(w) + "'");
    }
    return v;
  }
  size_t count() {
    int64_t n = integer();
    if (n < 0 || static_cast<uint64_t>(n) > s_.size()) fail("bad count");
    return static_cast<size_t>(n);
  }
  std::string_view take(size_t n) {
    if (pos_ >= s_.size() || s_[pos_] != '\n' || s_.size() - pos_ - 1 < n) fail("short kernel");
    ++pos_;
    std::string_view out = s_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  bool at_end() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n')) ++pos_;
    return pos_ == s_.size();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("plan text at byte " + std::to_string(pos_) + ": " + what);
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

template <typename T>
std::vector<T> read_list(Reader& r, std::string_view name) {
  r.expect(name);
  std::vector<T> out(r.count());
  for (T& v : out) v = static_cast<T>(r.integer());
  return out;
}

}  // namespace

std::string print_plan(const Plan& plan) {
  std::ostringstream os;
  os << kHeader << '\n' << "fused " << plan.num_fused_nodes << '\n';
  os << "steps " << plan.steps.size() << '\n';
  for (const PlanStep& s : plan.steps) {
    os << step_letter(s.kind) << ' ' << s.index << ' ' << s.root << '\n';
  }
  os << "groups " << plan.groups.size() << '\n';
  for (const KernelGroup& g : plan.groups) {
    print_list(os, "nodes", g.nodes);
    print_list(os, "inputs", g.inputs);
    print_list(os, "outputs", g.outputs);
    os << "index_status " << (g.index_status ? 1 : 0) << '\n';
    os << "reuse " << g.reuse.size();
    for (const auto& [in, out] : g.reuse) os << ' ' << in << ' ' << out;
    os << '\n';
    const std::string k = loop::print_kernel(g.kernel);
    os << "kernel " << k.size() << '\n' << k << '\n';
  }
  return os.str();
}

Plan parse_plan(std::string_view text) {
  Reader r(text);
  for (std::string_view w : {"ember-plan", "v1"}) r.expect(w);
  Plan plan;
  r.expect("fused");
  plan.num_fused_nodes = static_cast<int>(r.integer());
  r.expect("steps");
  plan.steps.resize(r.count());
  for (PlanStep& s : plan.steps) {
    std::string_view k = r.word();
    if (k == "E") {
      s.kind = PlanStep::Kind::Extern;
    } else if (k == "K") {
      s.kind = PlanStep::Kind::Kernel;
    } else if (k == "V") {
      s.kind = PlanStep::Kind::View;
    } else {
      r.fail("unknown step kind '" + std::string(k) + "'");
    }
    s.index = static_cast<int32_t>(r.integer());
    s.root = static_cast<graph::ValueId>(r.integer());
  }
  r.expect("groups");
  plan.groups.resize(r.count());
  for (KernelGroup& g : plan.groups) {
    g.nodes = read_list<int32_t>(r, "nodes");
    g.inputs = read_list<graph::ValueId>(r, "inputs");
    g.outputs = read_list<graph::ValueId>(r, "outputs");
    r.expect("index_status");
    g.index_status = r.integer() != 0;
    r.expect("reuse");
    g.reuse.resize(r.count());
    for (auto& [in, out] : g.reuse) {
      in = static_cast<graph::ValueId>(r.integer());
      out = static_cast<graph::ValueId>(r.integer());
    }
    r.expect("kernel");
    const size_t n = r.count();
    g.kernel = loop::parse_kernel(r.take(n));
  }
  for (const PlanStep& s : plan.steps) {
    if (s.kind == PlanStep::Kind::Kernel &&
        (s.index < 0 || static_cast<size_t>(s.index) >= plan.groups.size())) {
      r.fail("step of kernel group " + std::to_string(s.index) + " out of range");
    }
  }
  if (!r.at_end()) r.fail("text after the last group");
  return plan;
}

bool same_plan(const Plan& a, const Plan& b) {
  if (a.num_fused_nodes != b.num_fused_nodes || a.steps.size() != b.steps.size() ||
      a.groups.size() != b.groups.size()) {
    return false;
  }
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const PlanStep &x = a.steps[i], &y = b.steps[i];
    if (x.kind != y.kind || x.index != y.index || x.root != y.root) return false;
  }
  for (size_t i = 0; i < a.groups.size(); ++i) {
    const KernelGroup &x = a.groups[i], &y = b.groups[i];
    if (x.nodes != y.nodes || x.inputs != y.inputs || x.outputs != y.outputs ||
        x.index_status != y.index_status || x.reuse != y.reuse ||
        !loop::structurally_equal(x.kernel, y.kernel)) {
      return false;
    }
  }
  return true;
}

}  // namespace ember::sched
