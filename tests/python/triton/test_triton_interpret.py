"""Generated Triton kernels run in Triton's interpreter on the CPU, against the loop-IR
reference interpreter: pointwise (flattened) and row (block-loop reduction) forms, dtypes,
Python integer division, masked loads under Select, and the forms with no Triton kernel yet."""

from __future__ import annotations

import pathlib

import pytest

import ember
from triton_check import INTERPRET, check_kernel

GOLDEN = pathlib.Path(__file__).parents[2] / "cpp"


def test_pointwise_gelu_bias_is_flat():
    text = (GOLDEN / "codegen/golden/gelu_bias.loop").read_text()
    for m, n in [(5, 7), (33, 100), (1, 1)]:
        k = check_kernel(text, {"m": m, "n": n})
        assert k["form"] == "flat"


def test_softmax_with_constant_sizes_is_persistent():
    """Constant sizes: each row is one block, read once; what a loop stores is what a later loop
    reads (forwarded), and a store a later one overwrites is dropped."""
    text = (GOLDEN / "loop/golden/softmax.loop").read_text().replace("softmax(s0, s1)",
                                                                      "softmax()")
    for rows, cols in [(3, 5), (4, 1000), (2, 4096)]:
        k = check_kernel(text.replace("s0", str(rows)).replace("s1", str(cols)), {})
        body = k["source"].split("def ember_softmax")[1]
        assert "for " not in body and k["block"] >= cols
        # One read and one write per element: the loads of the three loops are one, and the
        # store of exp that the last loop overwrites is dropped.
        assert body.count("tl.load(") == 1 and body.count("tl.store(") == 1


def test_softmax_is_a_row_kernel_with_block_loops():
    text = (GOLDEN / "loop/golden/softmax.loop").read_text()
    for s0, s1 in [(3, 5), (4, 1000), (2, 1)]:
        k = check_kernel(text, {"s0": s0, "s1": s1})
        assert k["form"] == "rows" and k["programs"] == s0


def test_short_rows_run_as_row_tiles():
    """Many rows of 96 (ConvNeXt's layer norm over channels): 16 rows per program, reduced along
    axis 1; the mean a row stores is what its later loops read; the last program's rows past
    the end (8 of its 16) are masked."""
    text = (GOLDEN / "codegen/golden/layer_norm_rows.loop").read_text().replace("32768", "16392")
    k = check_kernel(text, {}, rtol=1e-2, atol=1e-2)
    assert k["form"] == "rows" and k["rows_per_program"] == 16 and k["programs"] == 1025


ROW_OPS = """
kernel row_ops(m, n) {
  input x : f32[m, n] strides [n, 1]
  output s : f32[m] strides [1]
  output p : f32[m] strides [1]
  output lo : f32[m] strides [1]
  output hi : f32[m] strides [1]
  for (i, 0, m) parallel {
    s[i] = f32(0)
    p[i] = f32(1)
    lo[i] = f32(inf)
    hi[i] = f32(-inf)
    for (r, 0, n) {
      accumulate sum s[i] <- x[((i * n) + r)]
      accumulate prod p[i] <- (f32(1) + (x[((i * n) + r)] * f32(0.01)))
      accumulate min lo[i] <- x[((i * n) + r)]
      accumulate max hi[i] <- x[((i * n) + r)]
    }
  }
}
"""


def test_sum_prod_min_max_into_outputs():
    for m, n in [(3, 17), (2, 1500)]:
        check_kernel(ROW_OPS, {"m": m, "n": n}, rtol=1e-4, atol=1e-5)


NAN_MAX = """
kernel nan_max(n) {
  input x : f32[n] strides [1]
  output y : f32[] strides []
  y[0] = f32(-inf)
  for (r, 0, n) {
    accumulate max y[0] <- select((r == 3), f32(nan), x[r])
  }
}
"""


def test_max_propagates_nan_and_a_kernel_without_outer_loops_is_one_program():
    k = check_kernel(NAN_MAX, {"n": 40})
    assert k["programs"] == 1


BF16 = """
kernel bf16_ops(n) {
  input a : bf16[n] strides [1]
  input b : bf16[n] strides [1]
  output y : bf16[n] strides [1]
  output z : f32[n] strides [1]
  for (i, 0, n) vectorized {
    let t = ((a[i] * b[i]) + bf16(0.5)) {
      y[i] = (exp(t) / ((t * t) + bf16(3)))
      z[i] = cast<f32>(t)
    }
  }
}
"""


def test_bf16_computes_in_f32_and_rounds_at_every_node():
    # Triton's interpreter truncates f32 to bf16 at each of the five rounding points (a GPU rounds
    # to nearest even): within five ulps there, one on a GPU.
    check_kernel(BF16, {"n": 300}, rtol=4e-2 if INTERPRET else 8e-3, atol=1e-2)


INT_DIV = """
kernel int_div(n) {
  input a : i64[n] strides [1]
  output q : i64[n] strides [1]
  output r : i64[n] strides [1]
  output c : b8[n] strides [1]
  for (i, 0, n) {
    q[i] = (a[i] // -7)
    r[i] = (a[i] % 7)
    c[i] = ((a[i] < 0) && !(a[i] == -3))
  }
}
"""


def test_integer_division_and_modulo_follow_python():
    check_kernel(INT_DIV, {"n": 100}, rtol=0, atol=0)


PAD = """
kernel pad(n) {
  input x : f32[n] strides [1]
  output y : f32[(n + 4)] strides [1]
  for (j, 0, (n + 4)) {
    y[j] = select(((2 <= j) && (j < (n + 2))), x[(j - 2)], f32(-1))
  }
}
"""


def test_load_under_a_select_arm_is_masked_by_its_condition():
    check_kernel(PAD, {"n": 50})


SCALAR_IF = """
kernel clamp_rows(m, n) {
  input x : f32[m, n] strides [n, 1]
  output y : f32[m, n] strides [n, 1]
  output t : f32[m] strides [1]
  for (i, 0, m) parallel {
    alloc acc : f32[1] {
      acc[0] = f32(0)
      for (r, 0, n) {
        accumulate sum acc[0] <- abs(x[((i * n) + r)])
      }
      if (f32(10) < acc[0]) {
        t[i] = acc[0]
      } else {
        t[i] = f32(0)
      }
      for (r, 0, n) vectorized {
        y[((i * n) + r)] = (x[((i * n) + r)] / max(acc[0], f32(1)))
      }
    }
  }
}
"""


def test_scalar_allocation_conditional_and_second_block_loop():
    check_kernel(SCALAR_IF, {"m": 6, "n": 37})


def test_argmax_with_padding_nan_and_ties():
    """argmax over a padded row (a Select guards the loads), then a scalar conditional on its
    result: one program."""
    text = (GOLDEN / "loop/golden/argmax_pad.loop").read_text()
    for n, seed in [(3, 0), (40, 1), (2000, 2)]:
        check_kernel(text, {"n": n}, seed=seed, rtol=0, atol=0)


def test_forms_without_a_triton_kernel_say_why():
    text = (GOLDEN / "loop/golden/layer_norm.loop").read_text()
    with pytest.raises(ember.Unsupported, match="welford"):
        check_kernel(text, {"s0": 2, "s1": 3})


GROUP_SUMS = """
kernel group_sums() {
  input x : f32[2, 8, 6, 5] strides [240, 1, 40, 8]
  output s : f32[4] strides [1]
  output q : f32[4] strides [1]
  for (p, 0, 4) parallel {
    let n = (p // 2) {
      let g = (p % 2) {
        alloc acc : f32[1] {
          alloc sq : f32[1] {
            acc[0] = f32(0)
            sq[0] = f32(0)
            for (m, 0, 30) {
              for (c, 0, 4) vectorized {
                accumulate sum acc[0] <- x[((((n * 240) + (g * 4)) + c) + (m * 8))]
                accumulate sum sq[0] <- (x[((((n * 240) + (g * 4)) + c) + (m * 8))] * x[((((n * 240) + (g * 4)) + c) + (m * 8))])
              }
            }
            s[p] = acc[0]
            q[p] = sq[0]
          }
        }
      }
    }
  }
}
"""


def test_a_short_vector_loop_in_a_serial_loop_is_one_block_loop():
    """The sums over a group of 4 channels of a channels-last [2, 8, 6, 5] tensor, every pixel (a
    group norm's rows): a serial loop of 30 pixels around a vector loop of 4 channels runs as one
    block loop over the 120 elements (loop/collapse.h: collapse_reduction_nests), not 30 steps of
    4 lanes with a tree reduction each."""
    k = check_kernel(GROUP_SUMS, {})
    body = k["source"].split("def ember_group_sums")[1]
    assert "for v_m in range" not in body and "ext2 = 120" in body, body
    assert k["form"] == "rows" and k["block"] >= 120  # one block holds the merged row


# A softmax over the last axis of a [2, 4, 5, 5] result whose input is laid out with the 4
# heads innermost (CaiT's talking-heads attention: a linear across heads, then a permute): per
# program one (batch, query) row of 4 channels x 5 keys, each of its three passes over the keys
# a loop around a vector loop of channels, two of them storing the output.
PERMUTED_SOFTMAX = """
kernel permuted_softmax() {
  input x : f32[50, 4] strides [4, 1]
  input b : f32[4] strides [1]
  output y : f32[2, 4, 5, 5] strides [100, 25, 5, 1]
  for (p, 0, 10) parallel {
    let n = (p // 5) {
      let q = (p % 5) {
        alloc mx : f32[4] {
          alloc sm : f32[4] {
            alloc inv : f32[4] {
              for (c, 0, 4) vectorized {
                mx[c] = f32(-inf)
              }
              for (k, 0, 5) {
                for (c, 0, 4) vectorized {
                  accumulate max mx[c] <- (x[(((c + (n * 100)) + (q * 20)) + (k * 4))] + b[c])
                }
              }
              for (c, 0, 4) vectorized {
                sm[c] = f32(0)
              }
              for (k, 0, 5) {
                for (c, 0, 4) vectorized {
                  let e = exp(((x[(((c + (n * 100)) + (q * 20)) + (k * 4))] + b[c]) - mx[c])) {
                    y[((((c * 25) + (n * 100)) + (q * 5)) + k)] = e
                    accumulate sum sm[c] <- e
                  }
                }
              }
              for (c, 0, 4) vectorized {
                inv[c] = (f32(1) / sm[c])
              }
              for (k, 0, 5) {
                for (c, 0, 4) vectorized {
                  y[((((c * 25) + (n * 100)) + (q * 5)) + k)] = (y[((((c * 25) + (n * 100)) + (q * 5)) + k)] * inv[c])
                }
              }
            }
          }
        }
      }
    }
  }
}
"""


def test_loops_that_store_along_rows_and_lanes_are_column_tiles():
    """Each pass over the keys runs as [keys, channels] tiles (Emitter::column_tiles), the two
    that store the output included, not as 5 serial steps of 4 lanes (CaiT's softmax was 0.59x
    of Inductor's speed on the H100 that way)."""
    k = check_kernel(PERMUTED_SOFTMAX, {})
    body = k["source"].split("def ember_permuted_softmax")[1]
    assert "for v_k in range" not in body, body
    assert body.count("(4096 // RBLOCK)):") == 3, body


def test_a_store_read_elsewhere_in_its_loop_keeps_the_serial_loop():
    """A loop that reads the buffer it stores at another element (here the previous key's) has
    an order between its rows: it stays a serial loop, and matches the reference."""
    text = PERMUTED_SOFTMAX.replace(
        "y[((((c * 25) + (n * 100)) + (q * 5)) + k)] = (y[((((c * 25) + (n * 100)) + (q * 5)) + k)] * inv[c])",
        "y[((((c * 25) + (n * 100)) + (q * 5)) + k)] = (y[((((c * 25) + (n * 100)) + (q * 5)) + "
        "max((k - 1), 0))] * inv[c])")
    k = check_kernel(text, {})
    body = k["source"].split("def ember_permuted_softmax")[1]
    assert "for v_k in range" in body and body.count("(4096 // RBLOCK)):") == 2, body


def test_nested_selects_reading_a_scalar_under_their_arms():
    """A float floor division by a 0-dim tensor (XCiT's Fourier position encoding) is lowered as
    Selects nested around reads of the scalar; their conditions are named once (sel<k>) and the
    kernel matches the reference. (The outermost condition reads no scalar: Triton's interpreter
    cannot `&` a block mask with a scalar condition, which compiled Triton can.)"""
    text = """
kernel nested_select(n) {
  input d : f32[] strides []
  input x : f32[n] strides [1]
  output y : f32[n] strides [1]
  for (i, 0, n) parallel {
    y[i] = select((x[i] < f32(-1)), x[i], select((x[i] < d[0]), (x[i] / d[0]), select(((d[0] * f32(2)) < x[i]), (x[i] - d[0]), (x[i] * d[0]))))
  }
}
"""
    k = check_kernel(text, {"n": 300})
    named = [l.split("=")[0].strip() for l in k["source"].splitlines()
             if l.strip().startswith("sel") and " = " in l]
    assert len(named) == 3, k["source"]
