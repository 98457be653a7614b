//! Every WGSL source of the wgpu backend, and how they are composed.
//!
//! Each op shader is `preamble + mx_common.wgsl + op.wgsl`. The preamble is generated here from
//! the Rust format table ([`MxFormat::spec`]), so formats stay defined in one place
//! (`src/format/`): adding a format is a table row there and nothing here.

use crate::format::{ElemKind, MxFormat};
use crate::moe::exact_math::{EXP2_NEG_Q31, LN2_Q32, LOG2E_Q63};
use crate::moe::Scoring;

/// Shared decode/encode of every format and E8M0 (integer arithmetic on fp32 bits).
pub const MX_COMMON: &str = include_str!("../../../shaders/mx_common.wgsl");
/// Exact sigmoid, exp, f32 division and flushed add on integers (routing keys and weights).
pub const EXACT_MATH: &str = include_str!("../../../shaders/exact_math.wgsl");
/// quantize / dequantize / qdq entry points.
pub const QUANT: &str = include_str!("../../../shaders/quant.wgsl");
/// Routing: softmax / top-k-softmax / sigmoid, groups.
pub const ROUTE: &str = include_str!("../../../shaders/route.wgsl");
/// The MoE layer: lists, gemm1, gemm2, combine.
pub const MOE: &str = include_str!("../../../shaders/moe.wgsl");

/// The op shaders: (name, file name, source). The file name is what `tests/shaders.rs` checks
/// against the `shaders/` directory.
pub const SHADERS: [(&str, &str, &str); 3] = [
    ("quant", "quant.wgsl", QUANT),
    ("route", "route.wgsl", ROUTE),
    ("moe", "moe.wgsl", MOE),
];

/// How a format marks NaN/Inf codes: 0 none, 1 OFP8 E4M3 (S.1111.111 is NaN), 2 IEEE-like
/// (all-ones exponent: mantissa 0 = Inf, else NaN).
const fn nan_kind(f: MxFormat) -> u32 {
    match f {
        MxFormat::Fp8E4M3 => 1,
        MxFormat::Fp8E5M2 => 2,
        MxFormat::Fp4E2M1 | MxFormat::Fp6E2M3 | MxFormat::Fp6E3M2 | MxFormat::Int8 => 0,
    }
}

/// max_normal's significand as a 24-bit integer (max = max_mant * 2^(emax - 23)), for RCeil.
/// Exact: every max_normal has at most 7 significant bits and exponent `emax_elem`.
fn max_mant(f: MxFormat) -> u32 {
    let sp = f.spec();
    let m = sp.max_normal / 2f64.powi(sp.emax_elem) * (1u32 << 23) as f64;
    assert!(
        m.fract() == 0.0 && (8_388_608.0..16_777_216.0).contains(&m),
        "{}: max_normal {} is not 1.f * 2^emax_elem",
        sp.name,
        sp.max_normal
    );
    m as u32
}

/// The generated WGSL preamble: `struct MxSpec` and `fn mx_spec(f) -> MxSpec`.
pub fn preamble() -> String {
    let mut s = String::from(
        "// GENERATED from src/format (MxFormat::spec) by src/backend/wgpu/source.rs.\n\
         struct MxSpec {\n    is_int: u32,\n    ebits: u32,\n    mbits: u32,\n    bias: i32,\n    \
         emax: i32,\n    code_bits: u32,\n    max_code: u32,\n    sign_bit: u32,\n    \
         even_mbits: u32,\n    nan_kind: u32,\n    max_mant: u32,\n}\n\n\
         fn mx_spec(f: u32) -> MxSpec {\n",
    );
    let n = MxFormat::ALL.len();
    for (i, f) in MxFormat::ALL.iter().enumerate() {
        let sp = f.spec();
        let is_int = (sp.kind == ElemKind::Int) as u32;
        let even_mbits = sp.mbits; // INT8's `even` width is its mantissa width 6 (format docs)
        let row = format!(
            "MxSpec({is_int}u, {}u, {}u, {}, {}, {}u, {}u, {}u, {even_mbits}u, {}u, {:#010x}u)",
            sp.ebits,
            sp.mbits,
            sp.bias,
            sp.emax_elem,
            sp.code_bits,
            sp.max_code,
            sp.sign_bit(),
            nan_kind(*f),
            max_mant(*f)
        );
        if i + 1 < n {
            s += &format!(
                "    if f == {}u {{\n        return {row};\n    }}\n",
                f.id()
            );
        } else {
            s += &format!("    // {}\n    return {row};\n", f.name());
        }
    }
    s += "}\n\n";
    for sc in Scoring::ALL {
        s += &format!(
            "const SCORING_{}: u32 = {}u;\n",
            sc.name().to_ascii_uppercase(),
            sc.id()
        );
    }
    s += "\n// The exact sigmoid's constants (src/moe/exact_math.rs).\n";
    s += &format!(
        "const SIG_LOG2E_Q63_HI: u32 = {:#010x}u;\nconst SIG_LOG2E_Q63_LO: u32 = {:#010x}u;\n\
         const SIG_LN2_Q32: u32 = {:#010x}u;\nconst SIG_EXP2_NEG_Q31 = array<u32, 64>(",
        (LOG2E_Q63 >> 32) as u32,
        LOG2E_Q63 as u32,
        LN2_Q32
    );
    for (i, t) in EXP2_NEG_Q31.iter().enumerate() {
        s += if i % 6 == 0 { "\n    " } else { " " };
        s += &format!("{t:#010x}u,");
    }
    s += "\n);\n\n";
    s
}

/// The full source of op shader `name` ("quant", "route", "moe"), ready to compile.
pub fn compose(name: &str) -> Option<String> {
    let (_, _, src) = SHADERS.iter().find(|(n, _, _)| *n == name)?;
    let exact = if name == "route" { EXACT_MATH } else { "" };
    Some(format!("{}{}\n{exact}\n{}", preamble(), MX_COMMON, src))
}
