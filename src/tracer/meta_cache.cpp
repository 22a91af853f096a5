#include "tracer/meta_cache.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DefaultDtype.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace ember::tracer {

namespace {

struct TensorSpec {
  bool defined = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

/// One result: a tensor, a list of tensors, or a value that is not a tensor.
using Result = std::variant<TensorSpec, std::vector<TensorSpec>, c10::IValue>;

void put_ints(std::string& key, c10::IntArrayRef v) {
  key += '[';
  for (int64_t x : v) key += std::to_string(x) + ',';
  key += ']';
}

bool key_of_tensor(const at::Tensor& t, std::string& key) {
  if (!t.defined()) {
    key += 'u';
    return true;
  }
  if (t.is_meta()) {
    key += 'T' + std::to_string(static_cast<int>(t.scalar_type()));
    put_ints(key, t.sizes());
    put_ints(key, t.strides());
    key += std::to_string(t.storage_offset());
    return true;
  }
  if (t.unsafeGetTensorImpl()->is_wrapped_number() && t.device().is_cpu()) {
    key += 'W' + std::to_string(static_cast<int>(t.scalar_type())) + ':';
    if (c10::isFloatingType(t.scalar_type())) {
      double d = t.item<double>();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, sizeof bits);
      key += std::to_string(bits);
    } else if (c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
      key += std::to_string(t.item<int64_t>());
    } else {
      return false;
    }
    return true;
  }
  return false;
}

bool key_of(const c10::IValue& v, std::string& key) {
  key += '|';
  if (v.isTensor()) return key_of_tensor(v.toTensor(), key);
  if (v.isNone()) {
    key += 'N';
  } else if (v.isBool()) {
    key += v.toBool() ? "b1" : "b0";
  } else if (v.isInt()) {
    key += 'i' + std::to_string(v.toInt());
  } else if (v.isDouble()) {
    double d = v.toDouble();
    uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    key += 'd' + std::to_string(bits);
  } else if (v.isString()) {
    key += 's' + v.toStringRef();
  } else if (v.isDevice()) {
    key += 'D' + v.toDevice().str();
  } else if (v.isIntList()) {
    key += 'I';
    put_ints(key, v.toIntVector());
  } else if (v.isTensorList()) {
    key += 'L';
    for (const at::Tensor& t : v.toTensorVector()) {
      if (!key_of_tensor(t, key)) return false;
    }
  } else if (v.isList()) {
    key += 'G';
    for (const c10::IValue& e : v.toListRef()) {
      if (!key_of(e, key)) return false;
    }
  } else {
    return false;  // doubles lists, symbolic values, generators, ...: not cached
  }
  return true;
}

TensorSpec spec_of(const at::Tensor& t) {
  TensorSpec s;
  s.defined = t.defined();
  if (!s.defined) return s;
  s.dtype = t.scalar_type();
  s.sizes = t.sizes().vec();
  s.strides = t.strides().vec();
  return s;
}

/// A result the cache can rebuild: new meta tensors at offset 0, or plain values.
bool rebuildable(const at::Tensor& t) {
  return !t.defined() || (t.is_meta() && t.storage_offset() == 0);
}

at::Tensor make(const TensorSpec& s) {
  if (!s.defined) return at::Tensor();
  return at::empty_strided(s.sizes, s.strides,
                           at::TensorOptions().dtype(s.dtype).device(c10::kMeta));
}

struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<Result>> entries;
};

Cache& cache() {
  static auto* c = new Cache();  // never destroyed: it may be used during interpreter shutdown
  return *c;
}

}  // namespace

void call_meta_cached(const c10::OperatorHandle& op, torch::jit::Stack& meta_stack) {
  const c10::FunctionSchema& schema = op.schema();
  bool cacheable = !schema.is_mutable();
  for (const c10::Argument& r : schema.returns()) cacheable = cacheable && !r.alias_info();
  std::string key;
  if (cacheable) {
    key = schema.operator_name().name + "." + schema.overload_name();
    key += '#' + std::to_string(static_cast<int>(c10::get_default_dtype_as_scalartype()));
    for (c10::DeviceType d : {c10::kCPU, c10::kCUDA}) {
      key += at::autocast::is_autocast_enabled(d)
                 ? 'A' + std::to_string(static_cast<int>(at::autocast::get_autocast_dtype(d)))
                 : std::string("a");
    }
    for (const c10::IValue& v : meta_stack) {
      if (!key_of(v, key)) {
        cacheable = false;
        break;
      }
    }
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache().mu);
    auto it = cache().entries.find(key);
    if (it != cache().entries.end()) {
      meta_stack.clear();
      for (const Result& r : it->second) {
        if (const auto* t = std::get_if<TensorSpec>(&r)) {
          meta_stack.emplace_back(make(*t));
        } else if (const auto* l = std::get_if<std::vector<TensorSpec>>(&r)) {
          c10::List<at::Tensor> list;
          for (const TensorSpec& s : *l) list.push_back(make(s));
          meta_stack.emplace_back(list);
        } else {
          meta_stack.push_back(std::get<c10::IValue>(r));
        }
      }
      return;
    }
  }
  op.callBoxed(&meta_stack);
  if (!cacheable) return;
  std::vector<Result> results;
  for (const c10::IValue& r : meta_stack) {
    if (r.isTensor()) {
      if (!rebuildable(r.toTensor())) return;
      results.emplace_back(spec_of(r.toTensor()));
    } else if (r.isTensorList()) {
      std::vector<TensorSpec> l;
      for (const at::Tensor& t : r.toTensorVector()) {
        if (!rebuildable(t)) return;
        l.push_back(spec_of(t));
      }
      results.emplace_back(std::move(l));
    } else if (r.isNone() || r.isInt() || r.isDouble() || r.isBool()) {
      results.emplace_back(r);
    } else {
      return;
    }
  }
  std::lock_guard<std::mutex> lock(cache().mu);
  if (cache().entries.size() > 100000) cache().entries.clear();
  cache().entries.emplace(std::move(key), std::move(results));
}

void clear_meta_cache() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().entries.clear();
}

size_t meta_cache_size() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().entries.size();
}

}  // namespace ember::tracer
