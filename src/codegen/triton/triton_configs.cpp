#include "codegen/triton/triton_configs.h"

#include <algorithm>

namespace ember::codegen {

using namespace loop;

namespace {

int64_t eval_int(const Expr& e, const Bindings& sizes) {
  EvalEnv env;
  env.sizes = sizes;
  return eval_expr(e, env).i;
}

}  // namespace

std::vector<TritonConfig> triton_configs(const TritonKernel& k, const Bindings& sizes) {
  const TritonLaunch def = triton_launch(k, sizes);
  const bool row_tile = !k.rows_param.empty();
  std::vector<TritonConfig> out{{def.block, 4, row_tile ? k.rows_per_program : 0}};
  const int64_t extent = eval_int(k.block_extent, sizes);
  const int64_t grid = eval_int(k.grid_extent, sizes);
  // Flat and Combo: the grid is the elements; Rows: the rows (a row tile's too), each of `extent`.
  const bool flat = k.form == TritonKernel::Form::Flat || k.form == TritonKernel::Form::Combo;
  int64_t elements = flat ? grid : grid * extent;
  if (k.form == TritonKernel::Form::Tiled) {
    elements = grid * eval_int(k.tile_cols, sizes) * eval_int(k.tile_rows, sizes);
  }
  if (elements < kMinTunedElements) return out;
  auto add = [&](TritonConfig c) {
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  if (k.form == TritonKernel::Form::Tiled) {
    add({64, 8});
    add({16, 2});
    return out;
  }
  if (flat) {
    for (TritonConfig c : {TritonConfig{512, 4}, TritonConfig{256, 4}, TritonConfig{1024, 8}}) {
      if (c.block <= def.block) add(c);
    }
    return out;
  }
  if (row_tile) {  // rows per program and warps
    const int r = k.rows_per_program;
    for (int rows : {r, 2 * r, r / 2}) {
      if (rows < 1 || rows > 64 || int64_t{def.block} * rows > 8192) continue;
      for (int warps : {4, 8}) add({def.block, warps, rows});
    }
    return out;
  }
  // Rows: lanes per thread from the block's width. Wide rows gain from more warps, narrow ones
  // (many short rows) from fewer.
  const int64_t lanes = def.block;
  if (lanes >= 1024) add({def.block, 8});
  if (lanes >= 4096) add({def.block, 16});
  if (lanes <= 512) add({def.block, 2});
  return out;
}

}  // namespace ember::codegen
