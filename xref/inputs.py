"""Writes xref/vectors/inputs.safetensors: the shared input blocks of every peer script
(common.inputs), one [B, 32] f32 tensor per format, with the block descriptions in the metadata.
`mxmoe golden` embeds this file, so the published profile cases use exactly the inputs the peers
were run on (tests/golden_set.rs checks them against the peers' vectors). Run: xref/inputs.sh
"""
import sys
import common

out, cases = {}, {}
for f in common.FORMATS:
    x, desc = common.inputs(f)
    out[f] = x
    cases[f] = desc
common.save(sys.argv[1], out, {"cases": cases, "generator": "xref/common.py"})
print("inputs:", {f: v.shape for f, v in out.items()})
