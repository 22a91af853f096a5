# Probes for the GPU machine (torch 2.11): new_tensor on a tracer tensor, MHA strides per backend.
import torch, ember, traceback
x = torch.randn(2, 3, device="cuda")
try:
    g = ember.trace(lambda x: x.new_tensor([[0.5], [1.5]]) * x, [x]); print(g)
except Exception as e:
    print("new_tensor:", type(e).__name__, str(e)[:300])
mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).cuda().eval()
q = torch.randn(2, 5, 16, device="cuda")
with torch.no_grad():
    print("eager", mha(q, q, q, need_weights=False)[0].stride())
    for b in ["aot_eager", "inductor", "ember"]:
        torch._dynamo.reset()
        print(b, torch.compile(lambda q: mha(q, q, q, need_weights=False)[0], backend=b)(q).stride())
