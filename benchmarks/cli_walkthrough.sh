#!/usr/bin/env bash
# The CLI walked through on the GPU as a user would (issue 7's evidence): save a U-Net state_dict
# and an exported DCGAN program, then `info`, `patch` (with reports), and load the patched
# checkpoint in a fresh process. Writes to $1 (a scratch folder); prints every command and its
# exit code.
set -uo pipefail
D=${1:-/tmp/cli_walkthrough}
mkdir -p "$D"
show() { echo "\$ $*"; "$@"; echo "(exit $?)"; }
# the console script when installed (pip install -e .), else the same entry point via -m
deconv-patch() { if type -P deconv-patch >/dev/null; then command deconv-patch "$@"; else python3 -m deconv_patch.cli "$@"; fi; }
python3 - "$D" <<'PY'
import sys, torch
from examples.unet import build_model as unet
from examples.dcgan import build_model as dcgan
d = sys.argv[1]
torch.manual_seed(0)
torch.save({"state_dict": unet().state_dict(), "epoch": 12}, f"{d}/unet.pt")
g = dcgan().eval()
torch.export.save(torch.export.export(g, (torch.randn(16, 100, 1, 1),)), f"{d}/dcgan.pt2")
PY
UNET=(--model examples.unet:build_model)
show deconv-patch info "$D/unet.pt" "${UNET[@]}" --device cuda
show deconv-patch patch "$D/unet.pt" -o "$D/unet_patched.pt" "${UNET[@]}" --input-shape 2,1,572,572 \
  --device cuda --report "$D/unet_report.html"
show deconv-patch patch "$D/unet.pt" -o "$D/unet_patched_bf16.pt" "${UNET[@]}" \
  --input-shape 2,1,572,572 --dtype bf16 --channels-last --device cuda --report "$D/unet_report.json"
show deconv-patch patch "$D/dcgan.pt2" -o "$D/dcgan_patched.pt2" --input-shape 16,100,1,1 \
  --device cuda --report "$D/dcgan_report.md"
echo "--- fresh process: load the patched checkpoint and the patched program"
python3 - "$D" <<'PY'
import sys, torch, deconv_patch
from examples.unet import build_model
d = sys.argv[1]
model = deconv_patch.load(f"{d}/unet_patched.pt").cuda().eval()
deconv_patch.summary(model)
original = build_model()
original.load_state_dict(torch.load(f"{d}/unet.pt", weights_only=True)["state_dict"])
original = original.cuda().eval()
x = torch.randn(2, 1, 572, 572, device="cuda")
with torch.no_grad():
    diff = (model(x) - original(x)).abs().max().item()
print(f"loaded patched U-Net: max|patched - original| = {diff:.3e}")
program = torch.export.load(f"{d}/dcgan_patched.pt2")
ops = sorted({str(n.target) for n in program.graph.nodes if "deconv_patch" in str(n.target)})
print("patched .pt2 calls:", ops)
PY
ls -la "$D"
