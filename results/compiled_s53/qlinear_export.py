import torch, tempfile, os
torch.manual_seed(0)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        w = torch.randint(-127, 128, (256, 128), dtype=torch.int8)
        self.register_buffer("w", w)
        self.register_buffer("ones", torch.ones(256))
        self.register_buffer("zeros", torch.zeros(256, dtype=torch.int64))
    def forward(self, x8):
        u8 = (x8.to(torch.int16) + 128).to(torch.uint8)
        packed = torch.ops.onednn.qlinear_prepack(self.w, None)
        return torch.ops.onednn.qlinear_pointwise(u8, 1.0, 128, packed, self.ones, self.zeros, None, 1.0, 0, torch.float32, "none", [], "")
m = M().eval()
x = torch.randint(-127, 128, (8, 128), dtype=torch.int8)
ref = torch._int_mm(x, m.w.t()).float()
with torch.no_grad():
    print("eager equal", torch.equal(m(x), ref))
    ep = torch.export.export(m, (x,), strict=False)
    d = tempfile.mkdtemp()
    p = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "q.pt2"), inductor_configs={"freezing": True})
    run = torch._inductor.aoti_load_package(p)
    out = run(x)
    print("aoti equal", torch.equal(out, ref))
