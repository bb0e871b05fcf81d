#!/usr/bin/env bash
# Reproduces the GPU CLI test's first command with --debug (full traceback on failure).
set -u
python3 -c "
import torch
from examples import unet
torch.save(unet.build_model(small=True).eval().state_dict(), '/tmp/unet_small.pt')"
python3 -m deconv_patch.cli patch /tmp/unet_small.pt -o /tmp/u_small.pt \
  --model examples.unet:build_model --model-kwargs '{"small": true}' \
  --input-shape 1,1,188,188 --device cuda:0 --report /tmp/r.html --debug --force
