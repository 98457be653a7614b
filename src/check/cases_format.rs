//! The catalog's format cases: quantize / dequantize / QDQ of every format x scale mode,
//! bit-exact against the CPU reference.

use super::catalog::{Case, DequantInput, Expect, FormatInput, Kind, Tier, Values};
use crate::format::{MxFormat, ScaleMode, BLOCK};

fn quantize(tier: Tier, format: MxFormat, mode: ScaleMode, input: FormatInput) -> Case {
    Case {
        id: format!("quantize/{format}/{mode}/{}", input.name()),
        tier,
        kind: Kind::Quantize {
            format,
            mode,
            input,
        },
        expect: Expect::BitExact,
    }
}

fn qdq(tier: Tier, format: MxFormat, mode: ScaleMode, input: FormatInput) -> Case {
    Case {
        id: format!("qdq/{format}/{mode}/{}", input.name()),
        tier,
        kind: Kind::Qdq {
            format,
            mode,
            input,
        },
        expect: Expect::BitExact,
    }
}

fn dequantize(tier: Tier, format: MxFormat, input: DequantInput) -> Case {
    Case {
        id: format!("dequantize/{format}/{}", input.name()),
        tier,
        kind: Kind::Dequantize { format, input },
        expect: Expect::BitExact,
    }
}

/// Every format case.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // The contract's special blocks and random heavy-tailed matrices: quantize and QDQ for
    // every format x mode, dequantize of the `even` tensor.
    let inputs = [
        (
            Tier::Quick,
            FormatInput {
                values: Values::Special,
                k: BLOCK,
            },
        ),
        (
            Tier::Quick,
            FormatInput {
                values: Values::Random { rows: 37, seed: 5 },
                k: 96,
            },
        ),
        (
            Tier::Full,
            FormatInput {
                values: Values::Random {
                    rows: 1031,
                    seed: 5,
                },
                k: 1024,
            },
        ),
    ];
    for (tier, inp) in &inputs {
        for f in MxFormat::ALL {
            for m in ScaleMode::ALL {
                v.push(quantize(*tier, f, m, inp.clone()));
                v.push(qdq(*tier, f, m, inp.clone()));
                if m == ScaleMode::Even {
                    v.push(dequantize(*tier, f, DequantInput::Quantized(inp.clone())));
                }
            }
        }
    }
    for f in MxFormat::ALL {
        let id = f.id() as u64;
        for m in ScaleMode::ALL {
            // Per-format edge blocks: QDQ in rows of 64, quantize in rows of 96.
            v.push(qdq(
                Tier::Quick,
                f,
                m,
                FormatInput {
                    values: Values::Edges { seed: 11 + id },
                    k: 64,
                },
            ));
            v.push(quantize(
                Tier::Quick,
                f,
                m,
                FormatInput {
                    values: Values::Edges { seed: 23 + id },
                    k: 96,
                },
            ));
            // Block maxima over the whole finite fp32 range, rows of 4 blocks.
            v.push(quantize(
                Tier::Quick,
                f,
                m,
                FormatInput {
                    values: Values::AmaxSweep,
                    k: 4 * BLOCK,
                },
            ));
        }
        // Random codes under every scale byte; every code at every scale byte.
        v.push(dequantize(
            Tier::Quick,
            f,
            DequantInput::RandomBytes {
                rows: 97,
                k: 64,
                seed: 5 + id,
            },
        ));
        v.push(dequantize(Tier::Quick, f, DequantInput::AllCodes));
    }
    v
}
