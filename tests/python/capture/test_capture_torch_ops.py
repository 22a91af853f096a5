"""torch.* functions, torch.nn.functional, Tensor methods, reductions, views, indexing, cat/stack
and split/chunk, called from a captured frame."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from capture_check import check


def r(*shape):
    return torch.randn(*shape)


def test_torch_functions():
    def f(x, y):
        return torch.add(x, y, alpha=2), torch.mul(x, 3), torch.maximum(x, y), torch.clamp(x, -0.5, 0.5)
    check(f, r(4, 5), r(4, 5))


def test_tensor_methods():
    def f(x):
        return x.relu().add(1).mul(x).pow(2).sub(3).div(2)
    check(f, r(3, 4))


def test_functional_activations():
    def f(x):
        return F.relu(x), F.gelu(x), F.silu(x), F.sigmoid(x), F.leaky_relu(x, 0.2), F.elu(x), F.softplus(x)
    check(f, r(4, 6))


def test_functional_softmax_family():
    def f(x):
        return F.softmax(x, dim=-1), F.log_softmax(x, dim=1), torch.softmax(x, 0)
    check(f, r(4, 6))


def test_functional_linear_and_layer_norm():
    def f(x, w, b):
        y = F.linear(x, w, b)
        return F.layer_norm(y, (y.shape[-1],))
    check(f, r(3, 8), r(5, 8), r(5))


def test_functional_conv2d_and_pool():
    def f(x, w):
        y = F.conv2d(x, w, padding=1)
        return F.max_pool2d(y, 2), F.avg_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1)
    check(f, r(1, 2, 6, 6), r(3, 2, 3, 3), atol=1e-4, rtol=1e-4)


def test_functional_losses():
    def f(x, t, c):
        return F.mse_loss(x, t), F.l1_loss(x, t), F.cross_entropy(x, c)
    check(f, r(4, 5), r(4, 5), torch.tensor([0, 3, 1, 4]), atol=1e-4, rtol=1e-4)


def test_functional_pad_and_normalize():
    def f(x):
        return F.pad(x, (1, 2)), F.normalize(x, dim=-1)
    check(f, r(3, 4))


def test_reductions_full_and_dim():
    def f(x):
        return x.sum(), x.mean(dim=1), x.amax(0), x.amin(-1, keepdim=True), x.prod(1), x.var(1), x.std()
    check(f, r(4, 5), atol=1e-4, rtol=1e-4)


def test_reductions_max_returns_named_tuple_unpacked():
    def f(x):
        values, indices = x.max(dim=1)
        return values, indices
    check(f, r(4, 5))


def test_argmax_argmin_any_all():
    def f(x):
        return x.argmax(), x.argmin(1), (x > 0).any(), (x > -10).all(1)
    check(f, r(4, 5))


def test_cumsum_and_logsumexp():
    def f(x):
        return x.cumsum(1), torch.logsumexp(x, dim=0), x.norm(dim=1)
    check(f, r(3, 5), atol=1e-4, rtol=1e-4)


def test_matmul_bmm_einsum():
    def f(a, b):
        return torch.matmul(a, b), torch.bmm(a, b), torch.einsum("bij,bjk->bik", a, b)
    check(f, r(2, 3, 4), r(2, 4, 5), atol=1e-4, rtol=1e-4)


def test_view_reshape_permute_transpose():
    def f(x):
        return x.view(6, 4), x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 1).contiguous(), x.t() if x.dim() == 2 else x.flatten(1)
    check(f, r(2, 3, 4))


def test_unsqueeze_squeeze_expand_flatten():
    def f(x):
        y = x.unsqueeze(0).expand(3, -1, -1)
        return y + 1, y.squeeze(0) if y.shape[0] == 1 else y.flatten(0, 1), x[None].squeeze()
    check(f, r(2, 4))


def test_slicing():
    def f(x):
        return x[:, 1:3], x[::2], x[-1], x[1:, :-1], x[0, 2]
    check(f, r(4, 5))


def test_ellipsis_and_none_indexing():
    def f(x):
        return x[..., None], x[None, :, None], x[..., 0], x[:, None] * x[None, :]
    check(f, r(3, 4))


def test_index_with_tensor():
    def f(x, idx):
        return x[idx], x[:, idx], x[idx, idx]
    check(f, r(5, 5), torch.tensor([0, 2, 4, 1]))


def test_boolean_mask_indexing_via_where():
    def f(x):
        mask = x > 0
        return torch.where(mask, x, torch.zeros_like(x)).sum(), x.masked_fill(~mask, -1.0)
    check(f, r(4, 4))


def test_gather_index_select():
    def f(x, idx):
        return torch.gather(x, 1, idx), x.index_select(0, idx[:, 0])
    check(f, r(3, 4), torch.tensor([[0, 1], [2, 3], [1, 1]]))


def test_cat_of_list_built_in_function():
    def f(x, y):
        parts = [x, y * 2, x + y]
        return torch.cat(parts, dim=0)
    check(f, r(2, 3), r(2, 3))


def test_cat_of_tuple_and_stack():
    def f(x, y):
        return torch.cat((x, y), 1), torch.stack((x, y)), torch.stack([x, y, x], dim=-1)
    check(f, r(2, 3), r(2, 3))


def test_stack_of_comprehension():
    def f(x):
        return torch.stack([x * i for i in range(4)])
    check(f, r(3))


def test_split_with_unpacking():
    def f(x):
        a, b, c = torch.split(x, 2, dim=1)
        return a + b - c
    check(f, r(3, 6))


def test_chunk_with_unpacking():
    def f(x):
        q, k, v = x.chunk(3, dim=-1)
        return (q * k).sum(-1), v
    check(f, r(2, 9))


def test_split_sizes_and_unbind():
    def f(x):
        a, b = x.split([1, 3], dim=0)
        rows = x.unbind(0)
        return a.sum() + b.sum(), rows[0] * rows[-1], len(rows)
    check(f, r(4, 3))


def test_tensor_factories():
    def f(x):
        return torch.zeros_like(x) + torch.ones(3, 4) + torch.full((3, 4), 2.0) + torch.arange(4) + torch.eye(3, 4)
    check(f, r(3, 4))


def test_new_tensor_from_python_list():
    def f(x):
        w = torch.tensor([1.0, 2.0, 3.0])
        return x * w
    check(f, r(2, 3))


def test_dtype_conversion():
    def f(x):
        return x.to(torch.float64), x.int(), x.long() + 1, x.float(), x.to(dtype=torch.bfloat16).float(), x.type(torch.int32)
    check(f, r(5) * 10)


def test_shape_and_size_reads():
    def f(x):
        n, c = x.shape
        return x.reshape(c, n), x.size(0), x.size(), x.dim(), x.numel(), x.ndim
    check(f, r(2, 6))


def test_dtype_and_device_attributes():
    def f(x):
        y = torch.zeros(2, dtype=x.dtype, device=x.device)
        return y, x.dtype == torch.float32, x.is_floating_point()
    check(f, r(3))


def test_tril_triu_and_masked_fill_attention_mask():
    def f(q, k):
        s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
        mask = torch.triu(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool), 1)
        return s.masked_fill(mask, float("-inf")).softmax(-1)
    check(f, r(2, 4, 8), r(2, 4, 8), atol=1e-4, rtol=1e-4)


def test_scaled_dot_product_attention():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)
    check(f, r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8), atol=1e-4, rtol=1e-4)


def test_topk_sort():
    def f(x):
        v, i = x.topk(2, dim=1)
        s, j = torch.sort(x, dim=0)
        return v, i, s, j
    check(f, r(4, 5))


def test_repeat_roll_flip():
    def f(x):
        return x.repeat(2, 1), x.roll(1, 0), x.flip(1)
    check(f, r(3, 4))


def test_embedding_functional():
    def f(idx, w):
        return F.embedding(idx, w)
    check(f, torch.tensor([[0, 2], [3, 1]]), r(4, 3))


def test_new_zeros_new_full():
    def f(x):
        return x.new_zeros(2, 3) + x.new_full((2, 3), 4.0) + x.new_ones(3)
    check(f, r(3))


def test_max_named_tuple_attributes():
    def f(x):
        m = torch.min(x, 0)
        return m.values, m.indices, m[0] + 1
    check(f, r(4, 5))
