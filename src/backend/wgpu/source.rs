//! Every WGSL source of the wgpu backend, and how each [`Shader`] is composed from them.
//!
//! A shader is the generated [`preamble`] followed by its files (see [`Shader::files`]), e.g.
//! `preamble + mx_common.wgsl + quant.wgsl`. The preamble is generated here from the Rust side:
//! the format table ([`MxFormat::spec`]) and the ids of formats (`FMT_*`), scale modes
//! (`SCALE_*`), router scorings (`SCORING_*`) and activations (`ACT_*`), plus the constants of the
//! exact routing math ([`crate::moe::exact_math`]). So formats and ids are defined in one place
//! (`src/format/`, `src/moe/`), WGSL compares against the generated names and Rust passes
//! `.id()`: no number is written on both sides.

use crate::format::{ElemKind, MxFormat, ScaleMode};
use crate::moe::exact_math::{EXP2_NEG_Q31, LN2_Q32, LOG2E_Q63};
use crate::moe::{Activation, Scoring};

/// One file of `shaders/`, compiled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct File {
    /// The file name in `shaders/` (what `tests/shaders.rs` checks against the directory).
    pub name: &'static str,
    pub src: &'static str,
}

macro_rules! shader_file {
    ($name:literal) => {
        File {
            name: $name,
            src: include_str!(concat!("../../../shaders/", $name)),
        }
    };
}

/// Exact decode/encode of every format and E8M0 (integer arithmetic on fp32 bits).
pub const MX_COMMON: File = shader_file!("mx_common.wgsl");
/// Exact sigmoid, exp, f32 division and flushed add on integers (routing keys and weights).
pub const EXACT_MATH: File = shader_file!("exact_math.wgsl");
/// quantize / dequantize / qdq entry points.
pub const QUANT: File = shader_file!("quant.wgsl");
/// Routing: softmax / top-k-softmax / sigmoid, correction bias, groups.
pub const ROUTE: File = shader_file!("route.wgsl");
/// What the MoE passes share: parameters, bindings, tiles, weight decoding, epilogue helpers.
pub const MOE_COMMON: File = shader_file!("moe_common.wgsl");
/// How the expert passes read their weights: one binding set (every MoE shader's default).
pub const MOE_WEIGHTS_ONE: File = shader_file!("moe_weights_one.wgsl");
/// The same over up to four weight chunks in one dispatch (`Shader::compose_multi`).
pub const MOE_WEIGHTS_MULTI: File = shader_file!("moe_weights_multi.wgsl");
/// The MoE pass `lists`: expert histogram, prefix sum, row lists, tile list.
pub const MOE_LISTS: File = shader_file!("moe_lists.wgsl");
/// The prefill expert passes `gemm1`, `gemm2` (grouped GEMM).
pub const MOE_GEMM: File = shader_file!("moe_gemm.wgsl");
/// The prefill expert passes on cooperative matrices `coop_gemm1`, `coop_gemm2` (and the
/// device check `coop_check`).
pub const MOE_GEMM_COOP: File = shader_file!("moe_gemm_coop.wgsl");
/// The activation pre-passes `coopp_prep1`, `coopp_prep2` of the cooperative GEMM's kernel
/// k64p (f16 hi / lo rows with a power-of-two exponent per row; plain compute).
pub const MOE_COOP_PREPASS: File = shader_file!("moe_coop_prepass.wgsl");
/// The decode expert passes `gemv1`, `gemv2` (grouped GEMV).
pub const MOE_GEMV: File = shader_file!("moe_gemv.wgsl");
/// The GEMV's FP4 word decode through a workgroup-memory table (every adapter).
pub const MOE_GEMV_FP4_TABLE: File = shader_file!("moe_gemv_fp4_table.wgsl");
/// The GEMV's FP4 word decode from bits in registers (adapters that pass its check).
pub const MOE_GEMV_FP4_REGISTERS: File = shader_file!("moe_gemv_fp4_registers.wgsl");
/// The GEMV's lane reductions with subgroup operations (adapters that pass `subgroup_check`).
pub const MOE_GEMV_REDUCE_SUBGROUP: File = shader_file!("moe_gemv_reduce_subgroup.wgsl");
/// The GEMV's lane reductions in workgroup memory (every adapter).
pub const MOE_GEMV_REDUCE_SHARED: File = shader_file!("moe_gemv_reduce_shared.wgsl");
/// The MoE pass `combine`: the deterministic sum over the top-k slots.
pub const MOE_COMBINE: File = shader_file!("moe_combine.wgsl");
/// The memory-bandwidth diagnostic of `WgpuBackend::bandwidth_probe` (self-contained).
pub const BANDWIDTH_PROBE: File = shader_file!("bandwidth_probe.wgsl");

/// Every file of `shaders/`.
pub const FILES: [File; 18] = [
    MX_COMMON,
    EXACT_MATH,
    QUANT,
    ROUTE,
    MOE_COMMON,
    MOE_WEIGHTS_ONE,
    MOE_WEIGHTS_MULTI,
    MOE_LISTS,
    MOE_GEMM,
    MOE_GEMM_COOP,
    MOE_COOP_PREPASS,
    MOE_GEMV,
    MOE_GEMV_FP4_TABLE,
    MOE_GEMV_FP4_REGISTERS,
    MOE_GEMV_REDUCE_SUBGROUP,
    MOE_GEMV_REDUCE_SHARED,
    MOE_COMBINE,
    BANDWIDTH_PROBE,
];

/// The most weight chunks one expert pass reads (moe_weights_multi.wgsl's binding sets).
pub const MAX_CHUNKS_PER_PASS: usize = 4;
/// The bindings of chunks 1, 2, 3 in moe_weights_multi.wgsl: (codes, scales, codes vec4) each,
/// standing beside bindings 7, 8 and 13 of chunk 0.
pub const MULTI_WEIGHT_BINDINGS: [[u32; 3]; 3] = [[22, 23, 24], [25, 26, 27], [28, 29, 30]];

/// The activation format id of a weight-only scheme (no activation QDQ): `FMT_NONE` in WGSL.
pub const FMT_NONE: u32 = 255;

/// The shaders (WGSL modules) of the backend; the pipeline cache keys on these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shader {
    /// `quantize`, `dequantize`, `qdq` (overrides `FMT`, `MODE`).
    Quant,
    /// `route`.
    Route,
    /// `lists` (override `TILE_M`).
    MoeLists,
    /// `gemm1`, `gemm2` (overrides `WEIGHT_FMT`, `ACT_FMT`, `ACT_SCALE_MODE`, `ACTIVATION`,
    /// `ROUND_BF16`).
    MoeGemm,
    /// `coop_gemm1`, `coop_gemm2` (the overrides of [`Shader::MoeGemm`]) and `coop_check`:
    /// the GEMM on cooperative matrices (f16, f32 accumulation; needs SHADER_F16, SUBGROUP and
    /// EXPERIMENTAL_COOPERATIVE_MATRIX).
    MoeGemmCoop,
    /// `coopp_prep1`, `coopp_prep2` (override `ACT_FMT`): the activation pre-passes of the
    /// cooperative GEMM's kernels k64p and k64pw, and `gemm1_pre_ref`, `gemm2_pre_ref` (the
    /// overrides of [`Shader::MoeGemm`]): the tiled GEMM over the pre-converted rows
    /// (moe_coop_prepass.wgsl; plain compute, every adapter).
    MoeCoopPrepass,
    /// `gemv1`, `gemv2` (the overrides of
    /// [`Shader::MoeGemm`] and `GEMV_R`, `GEMV_LANES`, `GEMV_THREADS`): FP4 decoded from bits in registers (`registers`; also
    /// `fp4_decode_check`) or through a table, lane sums reduced with subgroup operations
    /// (`subgroup`; also `subgroup_check`) or in workgroup memory.
    MoeGemv { registers: bool, subgroup: bool },
    /// `combine` (override `ROUND_BF16`).
    MoeCombine,
    /// `main`, `rows`, `rows_lut`.
    BandwidthProbe,
}

impl Shader {
    pub const ALL: [Shader; 12] = [
        Shader::Quant,
        Shader::Route,
        Shader::MoeLists,
        Shader::MoeGemm,
        Shader::MoeGemmCoop,
        Shader::MoeCoopPrepass,
        Shader::MoeGemv {
            registers: false,
            subgroup: false,
        },
        Shader::MoeGemv {
            registers: true,
            subgroup: false,
        },
        Shader::MoeGemv {
            registers: false,
            subgroup: true,
        },
        Shader::MoeGemv {
            registers: true,
            subgroup: true,
        },
        Shader::MoeCombine,
        Shader::BandwidthProbe,
    ];

    /// A short name (labels, messages).
    pub const fn name(self) -> &'static str {
        match self {
            Shader::Quant => "quant",
            Shader::Route => "route",
            Shader::MoeLists => "moe_lists",
            Shader::MoeGemm => "moe_gemm",
            Shader::MoeGemmCoop => "moe_gemm_coop",
            Shader::MoeCoopPrepass => "moe_coop_prepass",
            Shader::MoeGemv {
                registers: false,
                subgroup: false,
            } => "moe_gemv",
            Shader::MoeGemv {
                registers: true,
                subgroup: false,
            } => "moe_gemv_fp4_registers",
            Shader::MoeGemv {
                registers: false,
                subgroup: true,
            } => "moe_gemv_subgroup",
            Shader::MoeGemv {
                registers: true,
                subgroup: true,
            } => "moe_gemv_fp4_registers_subgroup",
            Shader::MoeCombine => "moe_combine",
            Shader::BandwidthProbe => "bandwidth_probe",
        }
    }

    /// The files composed, in order, after the generated preamble (when
    /// [`Shader::has_preamble`]).
    pub const fn files(self) -> &'static [File] {
        match self {
            Shader::Quant => &[MX_COMMON, QUANT],
            Shader::Route => &[EXACT_MATH, ROUTE],
            Shader::MoeLists => &[MX_COMMON, MOE_COMMON, MOE_WEIGHTS_ONE, MOE_LISTS],
            Shader::MoeGemm => &[MX_COMMON, MOE_COMMON, MOE_WEIGHTS_ONE, MOE_GEMM],
            Shader::MoeGemmCoop => &[
                MX_COMMON,
                MOE_COMMON,
                MOE_WEIGHTS_ONE,
                MOE_GEMM,
                MOE_GEMV_FP4_REGISTERS,
                MOE_GEMM_COOP,
            ],
            Shader::MoeCoopPrepass => &[
                MX_COMMON,
                MOE_COMMON,
                MOE_WEIGHTS_ONE,
                MOE_GEMM,
                MOE_COOP_PREPASS,
            ],
            Shader::MoeGemv {
                registers: false,
                subgroup: false,
            } => &[
                MX_COMMON,
                MOE_COMMON,
                MOE_WEIGHTS_ONE,
                MOE_GEMV_FP4_TABLE,
                MOE_GEMV_REDUCE_SHARED,
                MOE_GEMV,
            ],
            Shader::MoeGemv {
                registers: true,
                subgroup: false,
            } => &[
                MX_COMMON,
                MOE_COMMON,
                MOE_WEIGHTS_ONE,
                MOE_GEMV_FP4_REGISTERS,
                MOE_GEMV_REDUCE_SHARED,
                MOE_GEMV,
            ],
            Shader::MoeGemv {
                registers: false,
                subgroup: true,
            } => &[
                MX_COMMON,
                MOE_COMMON,
                MOE_WEIGHTS_ONE,
                MOE_GEMV_FP4_TABLE,
                MOE_GEMV_REDUCE_SUBGROUP,
                MOE_GEMV,
            ],
            Shader::MoeGemv {
                registers: true,
                subgroup: true,
            } => &[
                MX_COMMON,
                MOE_COMMON,
                MOE_WEIGHTS_ONE,
                MOE_GEMV_FP4_REGISTERS,
                MOE_GEMV_REDUCE_SUBGROUP,
                MOE_GEMV,
            ],
            Shader::MoeCombine => &[MX_COMMON, MOE_COMMON, MOE_WEIGHTS_ONE, MOE_COMBINE],
            Shader::BandwidthProbe => &[BANDWIDTH_PROBE],
        }
    }

    /// Whether the generated preamble comes first (every shader but the self-contained probe).
    pub const fn has_preamble(self) -> bool {
        !matches!(self, Shader::BandwidthProbe)
    }

    /// Whether the shader converts f16 to f32 (`unpack2x16float`): naga's
    /// `SHADER_FLOAT16_IN_FLOAT32` capability, wgpu's `DownlevelFlags::SHADER_F16_IN_F32`.
    pub const fn needs_f16_in_f32(self) -> bool {
        matches!(
            self,
            Shader::MoeGemv {
                registers: true,
                ..
            } | Shader::MoeGemmCoop
        )
    }

    /// Whether the shader uses subgroup operations (wgpu's `Features::SUBGROUP`).
    pub const fn needs_subgroup(self) -> bool {
        matches!(
            self,
            Shader::MoeGemv { subgroup: true, .. } | Shader::MoeGemmCoop
        )
    }

    /// Whether the shader uses f16 values (`enable f16`; wgpu's `Features::SHADER_F16`, naga's
    /// `SHADER_FLOAT16`) and cooperative matrices (`enable wgpu_cooperative_matrix`; wgpu's
    /// `Features::EXPERIMENTAL_COOPERATIVE_MATRIX`, naga's `COOPERATIVE_MATRIX`).
    pub const fn needs_coop(self) -> bool {
        matches!(self, Shader::MoeGemmCoop)
    }

    /// The enable directives that must open the source (before the preamble).
    pub const fn directives(self) -> &'static str {
        if self.needs_coop() {
            "enable f16;\nenable wgpu_cooperative_matrix;\n"
        } else {
            ""
        }
    }

    /// Whether the shader's expert passes read weights (bindings 7, 8, 13), so that it also
    /// exists with the weights of several chunks per dispatch ([`Shader::files_multi`]).
    pub const fn reads_weights(self) -> bool {
        matches!(
            self,
            Shader::MoeGemm | Shader::MoeGemmCoop | Shader::MoeCoopPrepass | Shader::MoeGemv { .. }
        )
    }

    /// The files of the shader with moe_weights_multi.wgsl in place of moe_weights_one.wgsl:
    /// its expert passes read up to [`MAX_CHUNKS_PER_PASS`] weight chunks in one dispatch
    /// (bindings [`MULTI_WEIGHT_BINDINGS`] besides 7, 8, 13). None for a shader that reads no
    /// weights.
    pub fn files_multi(self) -> Option<Vec<File>> {
        self.reads_weights().then(|| {
            self.files()
                .iter()
                .map(|&f| {
                    if f == MOE_WEIGHTS_ONE {
                        MOE_WEIGHTS_MULTI
                    } else {
                        f
                    }
                })
                .collect()
        })
    }

    /// The full source, ready to compile.
    pub fn compose(self) -> String {
        self.compose_files(self.files())
    }

    /// The full source of [`Shader::files_multi`] (None for a shader that reads no weights).
    pub fn compose_multi(self) -> Option<String> {
        self.files_multi().map(|f| self.compose_files(&f))
    }

    fn compose_files(self, files: &[File]) -> String {
        let mut s = self.directives().to_string();
        if self.has_preamble() {
            s += &preamble();
        }
        for f in files {
            s += &format!("// ---- {} ----\n", f.name);
            s += f.src;
            s += "\n";
        }
        s
    }
}

impl std::fmt::Display for Shader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a format marks NaN/Inf codes: 0 none, 1 OFP8 E4M3 (S.1111.111 is NaN), 2 IEEE-like
/// (all-ones exponent: mantissa 0 = Inf, else NaN).
pub(crate) const fn nan_kind(f: MxFormat) -> u32 {
    match f {
        MxFormat::Fp8E4M3 => 1,
        MxFormat::Fp8E5M2 => 2,
        MxFormat::Fp4E2M1 | MxFormat::Fp6E2M3 | MxFormat::Fp6E3M2 | MxFormat::Int8 => 0,
    }
}

/// max_normal's significand as a 24-bit integer (max = max_mant * 2^(emax - 23)), for RCeil.
/// Exact: every max_normal has at most 7 significant bits and exponent `emax_elem`.
pub(crate) fn max_mant(f: MxFormat) -> u32 {
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

/// The id constants of the generated preamble: (WGSL name, value), from the Rust enums.
pub fn id_constants() -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = Vec::new();
    let upper = |p: &str, n: &str| format!("{p}_{}", n.to_ascii_uppercase());
    v.extend(
        MxFormat::ALL
            .iter()
            .map(|f| (upper("FMT", f.name()), f.id())),
    );
    v.push(("FMT_NONE".into(), FMT_NONE));
    v.extend(
        ScaleMode::ALL
            .iter()
            .map(|m| (upper("SCALE", m.name()), m.id())),
    );
    v.extend(
        Scoring::ALL
            .iter()
            .map(|s| (upper("SCORING", s.name()), s.id())),
    );
    v.extend(
        Activation::ALL
            .iter()
            .map(|a| (upper("ACT", a.name()), a.id())),
    );
    v
}

/// The generated WGSL preamble: the id constants ([`id_constants`]), `struct MxSpec` and
/// `fn mx_spec(f) -> MxSpec`, and the exact routing math's constants.
pub fn preamble() -> String {
    let mut s = String::from(
        "// GENERATED by src/backend/wgpu/source.rs from src/format (MxFormat, ScaleMode) and\n\
         // src/moe (Scoring, Activation, exact_math).\n",
    );
    for (name, id) in id_constants() {
        s += &format!("const {name}: u32 = {id}u;\n");
    }
    s += "\nstruct MxSpec {\n    is_int: u32,\n    ebits: u32,\n    mbits: u32,\n    bias: i32,\n    \
         emax: i32,\n    code_bits: u32,\n    max_code: u32,\n    sign_bit: u32,\n    \
         even_mbits: u32,\n    nan_kind: u32,\n    max_mant: u32,\n}\n\n\
         fn mx_spec(f: u32) -> MxSpec {\n";
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
                "    if f == FMT_{} {{\n        return {row};\n    }}\n",
                f.name().to_ascii_uppercase()
            );
        } else {
            s += &format!(
                "    // FMT_{}\n    return {row};\n",
                f.name().to_ascii_uppercase()
            );
        }
    }
    s += "}\n\n";
    s += "// The exact routing math's constants (src/moe/exact_math.rs).\n";
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
