import torch, ember
def f(x, y):
    return (x + y).relu().sum(1)
x = torch.randn(3, 4, device="cuda"); y = torch.randn(4, device="cuda")
print("trace cpu"); print(ember.trace(f, [x.cpu(), y.cpu()]))
print("trace cuda"); print(ember.trace(f, [x, y]))
