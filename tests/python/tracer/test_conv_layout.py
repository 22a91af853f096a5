"""2D convolutions on CUDA (and on the CPU's oneDNN, in inference) are traced channels-last
(src/rewrite/conv_layout.h): their input and
weight are made channels-last, the result is channels-last as cuDNN returns it, the layout flows
through the ops after it, and 4D graph outputs go back to contiguous. Traced here for a cuda:0
the inputs only claim (nothing runs); tests/python/gpu runs such models against eager."""

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.tracing import trace_joint

CL = torch.channels_last


def _block(x, w1, w2, scale, shift):
    y = F.conv2d(x, w1, padding=1)
    y = F.relu(y * scale.view(8, 1, 1) + shift.view(8, 1, 1))  # batch norm in inference
    y = F.max_pool2d(y, 2)
    return F.conv2d(y, w2, padding=1) + 1


def _args(dtype=torch.float32):
    return [torch.randn(2, 3, 16, 16, dtype=dtype), torch.randn(8, 3, 3, 3, dtype=dtype),
            torch.randn(8, 8, 3, 3, dtype=dtype), torch.zeros(8, dtype=dtype),
            torch.ones(8, dtype=dtype)]


def _line(text, op):
    return [ln for ln in text.splitlines() if f"= {op}(" in ln]


def test_convolutions_run_channels_last_and_the_output_is_contiguous_again():
    text = str(ember.trace(_block, _args(), device="cuda:0"))
    convs = _line(text, "aten::convolution")
    assert len(convs) == 2, text
    # Channels-last strides of [2, 8, 16, 16] and [2, 8, 8, 8].
    assert "{2048, 1, 128, 8}" in convs[0] and "{512, 1, 64, 8}" in convs[1], text
    # The input and the two weights are copied channels-last; the pooled activation already is.
    clones = _line(text, "aten::clone")
    assert [c.count("memory_format=channels_last") for c in clones] == [1, 1, 1, 0], text
    # The output, channels-last after the second convolution, is contiguous again.
    assert "f32[2, 8, 8, 8] cuda:0 = aten::clone" in clones[-1], text
    assert "memory_format=contiguous_format" in clones[-1], text
    assert clones[-1].split(":")[0].strip() in text.splitlines()[-2], text  # it is returned


def test_depthwise_convolutions_too_but_not_grouped_ones():
    x = torch.randn(2, 16, 8, 8)
    depthwise = ember.trace(lambda x, w: F.conv2d(x, w, groups=16), [x, torch.randn(16, 1, 3, 3)],
                            device="cuda:0")
    assert "memory_format=channels_last" in str(depthwise)
    grouped = ember.trace(lambda x, w: F.conv2d(x, w, groups=4), [x, torch.randn(16, 4, 3, 3)],
                          device="cuda:0")
    assert "channels_last" not in str(grouped)


def test_cpu_convolutions_run_channels_last_on_onednn_in_inference():
    """On the CPU (row channels_last_convolution_cpu), grouped convolutions too, where ATen's
    convolutions run on oneDNN and grad mode is off; not in a joint (training) trace, recorded
    under grad mode, nor with oneDNN turned off."""
    def grouped(x, w):
        return F.conv2d(x, w, padding=1, groups=2) + 1

    args = [torch.randn(2, 4, 8, 8), torch.randn(6, 2, 3, 3)]
    with torch.no_grad():
        text = str(ember.trace(_block, _args()))
        assert [c.count("memory_format=channels_last") for c in _line(text, "aten::clone")] == \
            [1, 1, 1, 0], text
        assert "memory_format=channels_last" in str(ember.trace(grouped, args))
        with torch.backends.mkldnn.flags(enabled=False):
            assert "channels_last" not in str(ember.trace(grouped, args))
    joint, _, _ = trace_joint(lambda x, w: grouped(x, w).sum(), args, [False, True])
    assert "channels_last" not in str(joint)


@pytest.mark.parametrize("case", ["f64", "conv1d"])
def test_left_alone(case):
    if case == "conv1d":
        g = ember.trace(lambda x, w: F.conv1d(x, w), [torch.randn(2, 4, 32), torch.randn(8, 4, 3)],
                        device="cuda:0")
    else:
        dtype = torch.float64 if case == "f64" else torch.float32
        g = ember.trace(_block, _args(dtype), device="cuda:0")
    assert "channels_last" not in str(g)


def test_channels_last_input_stays_channels_last():
    # A program that is channels-last already: no copy of the input, and the output keeps the
    # layout eager gives it (channels-last, as cuDNN returns it).
    x = torch.randn(2, 3, 16, 16).to(memory_format=CL)
    w = torch.randn(8, 3, 3, 3).to(memory_format=CL)
    text = str(ember.trace(lambda x, w: F.relu(F.conv2d(x, w)), [x, w], device="cuda:0"))
    assert "aten::clone" not in text, text
    assert "{1568, 1, 112, 8}" in text.splitlines()[-3], text


@pytest.mark.parametrize("case", ["input", "weight", "transposed", "f64"])
def test_cpu_convolutions_of_channels_last_tensors_give_eager_strides(case):
    """On the CPU a convolution whose input or weight is channels-last returns channels-last (every
    dtype, transposed too); the meta kernel does not know, and the kernels after it wrote
    contiguous outputs (convolution_layout)."""
    dtype = torch.float64 if case == "f64" else torch.float32
    x = torch.randn(2, 4, 9, 11, dtype=dtype)
    w = torch.randn(4, 6, 3, 3, dtype=dtype) if case == "transposed" else torch.randn(6, 4, 3, 3, dtype=dtype)
    if case == "weight":
        w = w.to(memory_format=CL)
    else:
        x = x.to(memory_format=CL)
    conv = F.conv_transpose2d if case == "transposed" else F.conv2d

    def fn(x, w):
        return (conv(x, w, padding=1) + 1).relu()

    torch._dynamo.reset()
    got = torch.compile(fn, backend="ember")(x, w)
    want = fn(x, w)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_channels_last_only_in_layout_is_made_channels_last_in_atens_eyes(device):
    """Note [Channels-last in ATen's eyes]: a batch-1 input viewed from tokens (batch stride C) and
    a depthwise weight [C, 1, k, k] are channels-last contiguous, but the convolutions' layout
    choice sees NCHW and eager copies the input to NCHW. The rewrite restrides them (views, no
    copy) so the convolution runs channels-last; the graph's result keeps eager's layout."""
    def cpe(x, w):
        B, N, C = x.shape
        f = F.conv2d(x.transpose(1, 2).view(B, C, 6, 6), w, padding=1, groups=C)
        return x + f.flatten(2).transpose(1, 2)

    x, w = torch.randn(1, 36, 16), torch.randn(16, 1, 3, 3)
    with torch.no_grad():
        text = str(ember.trace(cpe, [x, w], device=device))
        conv = _line(text, "aten::convolution")
        assert len(conv) == 1 and "{576, 1, 96, 16}" in conv[0], text  # channels-last result
        assert "aten::clone" not in text and "aten::copy" not in text, text
        assert text.count("aten::as_strided") == 2, text  # the input and the weight restrided
        if device == "cpu":
            got = ember.compile(cpe)(x, w)
            want = cpe(x, w)
            assert got.stride() == want.stride()
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_a_weight_no_layout_makes_channels_last_is_left_as_it_is(device):
    """A 1x1 depthwise convolution (MobileOne's scale branch): its weight [C, 1, 1, 1] has the same
    strides in both layouts and ATen takes it as NCHW whatever they are. The rewrite makes the
    input channels-last and leaves the weight (restriding it again and again overflowed the
    stack)."""
    def scale_branch(x, w, w3):
        return F.conv2d(x, w, groups=8) + F.conv2d(x, w3, padding=1, groups=8)

    x, w, w3 = torch.randn(1, 8, 6, 6), torch.randn(8, 1, 1, 1), torch.randn(8, 1, 3, 3)
    with torch.no_grad():
        text = str(ember.trace(scale_branch, [x, w, w3], device=device))
        assert len(_line(text, "aten::convolution")) == 2, text
        if device == "cpu":
            torch.testing.assert_close(ember.compile(scale_branch)(x, w, w3), scale_branch(x, w, w3))
