"""Does our AR run slower right after a llama.cpp subprocess? Alternate: [llama, AR] and [AR, AR] pairs."""
import subprocess, time
from pathlib import Path
from fastforward.core.engine import compile_forward
from fastforward.models.loading import load_model
from fastforward.decoders import ar
from fastforward.core.decoder import GenerationConfig
L = Path.home() / ".cache/fastforward/llamacpp"
exe = L / "llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-completion"
lm = load_model("smollm2-135m", "float32", path="default", threads=2, weights="w8a8")
compile_forward(lm.model, store=Path.home() / ".cache/fastforward/compiled")
A = ar.build("ar", lm, None, {})
prompt = list(range(1000, 1100)); cfg = GenerationConfig(max_new_tokens=128)
def llama():
    subprocess.run([str(exe), "-m", str(L / "smollm2-135m-Q8_0.gguf"), "-p", "Tell me about the sea.", "-n", "128", "-t", "2", "-no-cnv", "--temp", "0"], capture_output=True)
def ms():
    r = A.generate(prompt, cfg); s = r.stats
    return (s.wall_time_s - s.prefill_time_s) / (len(r.tokens) - 1) * 1e3, s.prefill_time_s * 1e3
for _ in range(2): A.generate(prompt, cfg)
after, plain = [], []
for i in range(5):
    llama(); a = ms(); b = ms()
    after.append(a); plain.append(b)
    print(f"after llama.cpp: {a[0]:.2f} ms/token (prefill {a[1]:.0f} ms); next: {b[0]:.2f} (prefill {b[1]:.0f})", flush=True)
