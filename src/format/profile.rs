//! Compatibility profiles (`--profile NAME`): named bundles of choices that reproduce one other
//! MX implementation **bit for bit** where the contract (NUMERICS.md 5) deliberately differs.
//!
//! A profile is a row of data ([`Profile`]: its peer and the version checked, the scale modes and
//! formats the peer has, its FP4 layout, the measured differences) plus one small hook, its
//! [`Engine`]: how a block is quantized, QDQ'd and dequantized. The engines port the peers' own
//! arithmetic (the f32 operations they perform, in their order), each cited to the file it comes
//! from; `contract` and `ocp` use the exact integer pipeline of this module. The peers' committed
//! vectors (xref/vectors/, made by the scripts under xref/ with the real implementations) are
//! checked by tests/xref.rs; NUMERICS.md 17 lists every difference.
//!
//! Where a peer's behaviour is undefined (a C-style cast of NaN, Inf or an out-of-range float to
//! an integer: ggml's and ModelOpt's scale of a NaN/Inf block), the profile follows the contract
//! (a NaN block) and the vector tests skip those blocks, which the vector files mark.

use super::peers::{float_block, ggml_block, modelopt_block, msmx_qdq, quark_qdq, torchao_block};
use super::{
    dequant_elem, quantize_block, FormatError, MxFormat, MxTensor, ScaleMode, BLOCK, SCALE_NAN,
};
use std::fmt;
use std::str::FromStr;

/// The profiles, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum ProfileId {
    /// mxmoe's contract (NUMERICS.md 5): the default.
    #[default]
    Contract,
    /// The OCP MX v1.0 §6.3 conversion: exact floor scale, RNE, NaN blocks.
    Ocp,
    /// AMD Quark 0.13 `fake_quantize_mx` (the QDQ vLLM's Quark OCP MX emulation calls).
    Quark,
    /// torchao 0.18 `to_mx` / `to_dtype` on CPU.
    Torchao,
    /// NVIDIA Model Optimizer 0.47 (`MXFP8QTensor`, `MXFP4QTensor`).
    Nvidia,
    /// microsoft/microxcaling `_quantize_mx` (its PyTorch path, default rounding).
    Microxcaling,
    /// ggml / llama.cpp `quantize_row_mxfp4_ref` (gguf-py `quants.py::MXFP4`).
    Ggml,
}

/// How a profile computes a block (the hook of the row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The contract's exact integer pipeline (NUMERICS.md 5).
    Exact,
    /// torchao `mx_tensor.py::to_mx` (exponent bits; CPU RCEIL through `log2`) and `to_dtype`.
    Torchao,
    /// Quark `hw_emulation_interface.py::fake_quantize_mx`: an f32 scale (`torch.log2` floor /
    /// ceil, or `even_round`), an f32 divide, the element QDQ kernel, an f32 multiply.
    Quark,
    /// ModelOpt `MXFP8QTensor` / `MXFP4QTensor`: `ceil(log2(amax / max))`, buckets for FP4.
    ModelOpt,
    /// microxcaling `mx_ops.py::_quantize_mx` + `elemwise_ops.py::_quantize_elemwise_core` in
    /// f32, with the given element rounding.
    Microxcaling(MsmxRound),
    /// gguf-py `quants.py::MXFP4` (a port of ggml-quants.c): `floor(log2)` scale, nearest of
    /// the doubled table with ties to the lower index.
    Ggml,
}

/// microxcaling's element rounding (`elemwise_ops.py::_round_mantissa`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsmxRound {
    /// `round="nearest"` (its default): `sign(x) * floor(|x| + 0.5)`, ties away from zero.
    Nearest,
    /// `round="even"`: ties to even.
    Even,
}

/// Where a profile puts the two FP4 codes of a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp4Layout {
    /// Element 2i in the low nibble of byte i (OCP, Quark, torchao, ModelOpt; the contract).
    Linear,
    /// ggml `block_mxfp4.qs`: byte j holds element j (low nibble) and element j + 16 (high).
    GgmlSplit,
}

/// One profile: data (what it reproduces, what the peer offers) and its engine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    pub id: ProfileId,
    /// The name `--profile` takes.
    pub name: &'static str,
    /// The implementation reproduced and the version checked against its vectors.
    pub peer: &'static str,
    /// The scale mode used when none is given.
    pub default_mode: ScaleMode,
    /// The scale modes the peer offers (others are an error).
    pub modes: &'static [ScaleMode],
    /// The formats the peer has (others are an error).
    pub formats: &'static [MxFormat],
    pub engine: Engine,
    pub fp4_layout: Fp4Layout,
    /// The measured differences from the contract (NUMERICS.md 16 / 17 ids).
    pub differences: &'static str,
}

const ALL_MODES: &[ScaleMode] = &ScaleMode::ALL;
const ALL_FORMATS: &[MxFormat] = &MxFormat::ALL;
const FLOAT_FORMATS: &[MxFormat] = &[
    MxFormat::Fp4E2M1,
    MxFormat::Fp6E2M3,
    MxFormat::Fp6E3M2,
    MxFormat::Fp8E4M3,
    MxFormat::Fp8E5M2,
];

impl ProfileId {
    pub const ALL: [ProfileId; 7] = [
        ProfileId::Contract,
        ProfileId::Ocp,
        ProfileId::Quark,
        ProfileId::Torchao,
        ProfileId::Nvidia,
        ProfileId::Microxcaling,
        ProfileId::Ggml,
    ];

    /// The profile's row.
    pub const fn spec(self) -> Profile {
        match self {
            ProfileId::Contract => Profile {
                id: self,
                name: "contract",
                peer: "mxmoe (docs/NUMERICS.md 5)",
                default_mode: ScaleMode::Even,
                modes: ALL_MODES,
                formats: ALL_FORMATS,
                engine: Engine::Exact,
                fp4_layout: Fp4Layout::Linear,
                differences: "none",
            },
            ProfileId::Ocp => Profile {
                id: self,
                name: "ocp",
                peer: "OCP MX v1.0 §6.3 (checked against microsoft/microxcaling 7bc41952, round=even)",
                default_mode: ScaleMode::Floor,
                modes: &[ScaleMode::Floor],
                formats: ALL_FORMATS,
                engine: Engine::Exact,
                fp4_layout: Fp4Layout::Linear,
                differences: "floor scale (exact exponent bits), RNE; otherwise the contract",
            },
            ProfileId::Quark => Profile {
                id: self,
                name: "quark",
                peer: "amd-quark 0.13 (fake_quantize_mx, CPU kernels)",
                default_mode: ScaleMode::Even,
                modes: &[ScaleMode::Floor, ScaleMode::Even, ScaleMode::Ceil],
                formats: ALL_FORMATS,
                engine: Engine::Quark,
                fp4_layout: Fp4Layout::Linear,
                differences: "Q1 +0 for values rounding to zero (FP4/FP6); Q2 Inf block scale 2^127 (even); \
                    Q3 even clamps to 2^127; Q4 floor/ceil through f32 log2; Q5 no exponent clamp in floor/ceil; \
                    Q6 MXINT8 even with 8 mantissa bits; Q7 MXINT8 scale/64 clamped to 2^-126; Q8 byte 255 decodes to Inf (vLLM _dequant_mxfp6)",
            },
            ProfileId::Torchao => Profile {
                id: self,
                name: "torchao",
                peer: "torchao 0.18.0 (to_mx / to_dtype, CPU)",
                default_mode: ScaleMode::Floor,
                modes: ALL_MODES,
                formats: FLOAT_FORMATS,
                engine: Engine::Torchao,
                fp4_layout: Fp4Layout::Linear,
                differences: "T1 byte-0 blocks divided by 2^-126; T2 RCEIL reciprocal 1.0 for byte 0; \
                    T3 CPU RCEIL ceil(log2) in f32; T4 Inf blocks get a finite scale; T5 NaN-block codes not zeroed",
            },
            ProfileId::Nvidia => Profile {
                id: self,
                name: "nvidia",
                peer: "nvidia-modelopt 0.47.0 (MXFP8QTensor, MXFP4QTensor)",
                default_mode: ScaleMode::RCeil,
                modes: &[ScaleMode::RCeil],
                formats: &[MxFormat::Fp4E2M1, MxFormat::Fp8E4M3],
                engine: Engine::ModelOpt,
                fp4_layout: Fp4Layout::Linear,
                differences: "N1 RCEIL as ceil(log2(f32(amax / max))) in f32 (T3's rule); N2 FP4 ties toward zero; \
                    N3 FP4 zeros encode as -0 (code 0x8); N4 FP8 NaN blocks get byte 0",
            },
            ProfileId::Microxcaling => Profile {
                id: self,
                name: "microxcaling",
                peer: "microsoft/microxcaling 7bc41952 (_quantize_mx, PyTorch path, round=nearest)",
                default_mode: ScaleMode::Floor,
                modes: &[ScaleMode::Floor],
                formats: ALL_FORMATS,
                engine: Engine::Microxcaling(MsmxRound::Nearest),
                fp4_layout: Fp4Layout::Linear,
                differences: "M1 ties away from zero; M2 scale and element exponents through f32 log2; \
                    M3 -0 becomes +0; M4 fp32 arithmetic (underflow in tiny blocks)",
            },
            ProfileId::Ggml => Profile {
                id: self,
                name: "ggml",
                peer: "gguf-py 0.19.0 (llama.cpp quants.py MXFP4 = ggml-quants.c quantize_row_mxfp4_ref)",
                default_mode: ScaleMode::Floor,
                modes: &[ScaleMode::Floor],
                formats: &[MxFormat::Fp4E2M1],
                engine: Engine::Ggml,
                fp4_layout: Fp4Layout::GgmlSplit,
                differences: "L1 floor(log2) scale in f32; L2 ties toward zero; L3 +0 only; L4 split nibble order; \
                    L5 byte 255 decodes as 2^128",
            },
        }
    }

    pub const fn name(self) -> &'static str {
        self.spec().name
    }
}

impl fmt::Display for ProfileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Profile names, for messages.
pub fn profile_names() -> String {
    ProfileId::ALL.map(ProfileId::name).join(", ")
}

/// Why a profile cannot do what was asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProfileError {
    #[error("unknown profile '{0}' (expected one of: {list})", list = profile_names())]
    Unknown(String),
    #[error("profile {profile}: {peer} has no {format} (it has: {have})")]
    Format {
        profile: &'static str,
        peer: &'static str,
        format: MxFormat,
        have: String,
    },
    #[error("profile {profile}: {peer} has no '{mode}' scale mode (it has: {have})")]
    Mode {
        profile: &'static str,
        peer: &'static str,
        mode: ScaleMode,
        have: String,
    },
    #[error("profile {profile}: block {block} has no E8M0 byte / element codes ({why}); {peer} only fake-quantizes it (use qdq)")]
    NotRepresentable {
        profile: &'static str,
        peer: &'static str,
        block: usize,
        why: &'static str,
    },
    #[error(transparent)]
    Invalid(#[from] FormatError),
}

impl FromStr for ProfileId {
    type Err = ProfileError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        ProfileId::ALL
            .into_iter()
            .find(|p| p.name() == t)
            .ok_or_else(|| ProfileError::Unknown(s.to_string()))
    }
}

/// A quantized block under a profile: the scale byte, the codes, and the QDQ values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProfileBlock {
    /// The E8M0 byte, or `None` when the peer's scale is no E8M0 value (Quark floor/ceil
    /// below 2^-127, microxcaling's NaN exponent...) or an element is not a code.
    pub byte: Option<u8>,
    pub codes: [u8; BLOCK],
    /// The peer's quantize-dequantize output.
    pub qdq: [f32; BLOCK],
}

impl Profile {
    /// Check that the peer has this format and scale mode.
    pub fn check(&self, fmt: MxFormat, mode: ScaleMode) -> Result<(), ProfileError> {
        if !self.formats.contains(&fmt) {
            return Err(ProfileError::Format {
                profile: self.name,
                peer: self.peer,
                format: fmt,
                have: self
                    .formats
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if !self.modes.contains(&mode) {
            return Err(ProfileError::Mode {
                profile: self.name,
                peer: self.peer,
                mode,
                have: self
                    .modes
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(())
    }

    /// The scale mode to use: the one given, or the profile's default.
    pub fn mode(&self, given: Option<ScaleMode>) -> ScaleMode {
        given.unwrap_or(self.default_mode)
    }

    /// Quantize and QDQ one 32-element block the peer's way (format and mode already checked).
    pub fn block(&self, fmt: MxFormat, mode: ScaleMode, x: &[f32]) -> ProfileBlock {
        debug_assert_eq!(x.len(), BLOCK);
        match self.engine {
            Engine::Exact => {
                let mut codes = [0u8; BLOCK];
                let byte = quantize_block(fmt, mode, x, &mut codes);
                let mut qdq = [0f32; BLOCK];
                for (o, &c) in qdq.iter_mut().zip(&codes) {
                    *o = dequant_elem(fmt, c, byte);
                }
                ProfileBlock {
                    byte: Some(byte),
                    codes,
                    qdq,
                }
            }
            Engine::Torchao => torchao_block(fmt, mode, x),
            Engine::Quark => float_block(fmt, x, |b| quark_qdq(fmt, mode, b)),
            Engine::Microxcaling(r) => float_block(fmt, x, |b| msmx_qdq(fmt, r, b)),
            Engine::ModelOpt => modelopt_block(fmt, x),
            Engine::Ggml => ggml_block(x),
        }
    }

    /// Dequantize one code with its scale byte the peer's way.
    pub fn dequant_elem(&self, fmt: MxFormat, code: u8, byte: u8) -> f32 {
        match (self.engine, byte) {
            // vLLM `mxfp6_utils.py::_dequant_mxfp6` / Quark HIP bf16: 2^(255-127) = +Inf, so
            // x * Inf (NUMERICS.md 16, Q8); 0 * Inf = NaN.
            (Engine::Quark, SCALE_NAN) => dequant_elem(fmt, code, 127) * f32::INFINITY,
            // ggml `ggml_e8m0_to_fp32_half(255)` = 2^127 times the doubled table value.
            (Engine::Ggml, SCALE_NAN) => {
                (dequant_elem(fmt, code, 127) * 2.0) * f32::from_bits(254 << 23)
            }
            _ => dequant_elem(fmt, code, byte),
        }
    }

    /// QDQ a row-major buffer whose last dimension `k` is a multiple of 32.
    pub fn qdq_slice(
        &self,
        fmt: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        k: usize,
    ) -> Result<Vec<f32>, ProfileError> {
        self.check(fmt, mode)?;
        if self.engine == Engine::Exact {
            return Ok(super::qdq_slice(fmt, mode, x, k)?);
        }
        super::check_rows(x.len(), k)?;
        let mut out = vec![0f32; x.len()];
        for (o, b) in out.chunks_exact_mut(BLOCK).zip(x.chunks_exact(BLOCK)) {
            o.copy_from_slice(&self.block(fmt, mode, b).qdq);
        }
        Ok(out)
    }

    /// Pack 32 codes in the profile's layout.
    pub fn pack(&self, fmt: MxFormat, codes: &[u8], out: &mut [u8]) {
        if fmt == MxFormat::Fp4E2M1 && self.fp4_layout == Fp4Layout::GgmlSplit {
            for (j, o) in out.iter_mut().enumerate().take(BLOCK / 2) {
                *o = (codes[j] & 0xF) | (codes[j + 16] & 0xF) << 4;
            }
        } else {
            super::pack_codes(fmt, codes, out);
        }
    }

    /// Unpack 32 codes from the profile's layout.
    pub fn unpack(&self, fmt: MxFormat, packed: &[u8], codes: &mut [u8]) {
        if fmt == MxFormat::Fp4E2M1 && self.fp4_layout == Fp4Layout::GgmlSplit {
            for (j, &b) in packed.iter().enumerate().take(BLOCK / 2) {
                codes[j] = b & 0xF;
                codes[j + 16] = b >> 4;
            }
        } else {
            super::unpack_codes(fmt, packed, codes);
        }
    }

    /// Quantize a row-major buffer to a packed tensor in the profile's layout.
    pub fn quantize(
        &self,
        fmt: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<MxTensor, ProfileError> {
        self.check(fmt, mode)?;
        if self.engine == Engine::Exact {
            return Ok(MxTensor::quantize(fmt, mode, x, shape)?);
        }
        super::check_values(x.len(), shape)?;
        let bb = fmt.spec().block_bytes();
        let blocks = x.len() / BLOCK;
        let mut data = vec![0u8; blocks * bb];
        let mut scales = vec![0u8; blocks];
        for (i, xb) in x.chunks_exact(BLOCK).enumerate() {
            let b = self.block(fmt, mode, xb);
            let byte = b.byte.ok_or(ProfileError::NotRepresentable {
                profile: self.name,
                peer: self.peer,
                block: i,
                why: "its scale or an element is not an E8M0 / element value",
            })?;
            scales[i] = byte;
            self.pack(fmt, &b.codes, &mut data[i * bb..(i + 1) * bb]);
        }
        Ok(MxTensor::new(fmt, shape.to_vec(), data, scales)?)
    }

    /// Dequantize a packed tensor written in the profile's layout.
    pub fn dequantize(&self, t: &MxTensor) -> Vec<f32> {
        let bb = t.format.spec().block_bytes();
        let mut out = vec![0f32; t.numel()];
        let mut codes = [0u8; BLOCK];
        for ((o, p), &byte) in out
            .chunks_exact_mut(BLOCK)
            .zip(t.data.chunks_exact(bb))
            .zip(t.scales.iter())
        {
            self.unpack(t.format, p, &mut codes);
            for (v, &c) in o.iter_mut().zip(&codes) {
                *v = self.dequant_elem(t.format, c, byte);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        for p in ProfileId::ALL {
            assert_eq!(p.name().parse::<ProfileId>(), Ok(p));
            assert_eq!(p.spec().id, p);
            assert!(p.spec().modes.contains(&p.spec().default_mode), "{p}");
        }
        let e = "intel".parse::<ProfileId>().unwrap_err().to_string();
        assert!(e.contains("intel") && e.contains("torchao"), "{e}");
    }

    /// NUMERICS.md G5 (hand-written): the ggml row of the FP4 rounding table.
    #[test]
    fn ggml_g5_row() {
        let mut x = [0f32; BLOCK];
        let v = [
            5.0,
            0.25,
            0.75,
            1.25,
            1.75,
            2.5,
            3.5,
            -0.25,
            -0.75,
            -1.25,
            -2.5,
            -3.5,
            0.1,
            -0.1,
            f32::from_bits(0x3E80_0001),
            f32::from_bits(0x3E80_0004),
            4.75,
            5.5,
            -0.0,
            0.0,
        ];
        x[..v.len()].copy_from_slice(&v);
        let b = ProfileId::Ggml
            .spec()
            .block(MxFormat::Fp4E2M1, ScaleMode::Floor, &x);
        let want = [
            6, 0, 1, 2, 3, 4, 5, 0, 9, 0xA, 0xC, 0xD, 0, 0, 1, 1, 6, 7, 0, 0,
        ];
        assert_eq!(&b.codes[..want.len()], &want);
        assert_eq!(b.byte, Some(127));
    }

    /// G15 (hand-written): the ggml split order of codes [0..15, 15..0].
    #[test]
    fn ggml_split_packing() {
        let codes: Vec<u8> = (0..16).chain((0..16).rev()).collect();
        let mut out = [0u8; 16];
        ProfileId::Ggml
            .spec()
            .pack(MxFormat::Fp4E2M1, &codes, &mut out);
        assert_eq!(
            out,
            [
                0xF0, 0xE1, 0xD2, 0xC3, 0xB4, 0xA5, 0x96, 0x87, 0x78, 0x69, 0x5A, 0x4B, 0x3C, 0x2D,
                0x1E, 0x0F
            ]
        );
        let mut back = [0u8; 32];
        ProfileId::Ggml
            .spec()
            .unpack(MxFormat::Fp4E2M1, &out, &mut back);
        assert_eq!(back.to_vec(), codes);
    }

    #[test]
    fn unsupported_format_and_mode_are_errors() {
        let g = ProfileId::Ggml.spec();
        let e = g
            .check(MxFormat::Fp8E4M3, ScaleMode::Floor)
            .unwrap_err()
            .to_string();
        assert!(e.contains("mxfp8_e4m3") && e.contains("mxfp4"), "{e}");
        let t = ProfileId::Torchao.spec();
        assert!(t.check(MxFormat::Int8, ScaleMode::Floor).is_err());
        let q = ProfileId::Quark.spec();
        let e = q
            .check(MxFormat::Fp4E2M1, ScaleMode::RCeil)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rceil"), "{e}");
    }

    /// Scale byte 255 on dequantization, from the cited sources (hand-derived): Quark / vLLM
    /// `_dequant_mxfp6` compute 2^(255-127) = +Inf, so x * Inf (0 * Inf = NaN); ggml's
    /// `ggml_e8m0_to_fp32_half(255)` = 2^127 times the doubled table; the contract gives NaN.
    #[test]
    fn byte_255_decodes_per_profile() {
        let f = MxFormat::Fp4E2M1;
        let q = ProfileId::Quark.spec();
        assert_eq!(q.dequant_elem(f, 0x1, 255), f32::INFINITY);
        assert_eq!(q.dequant_elem(f, 0x9, 255), f32::NEG_INFINITY);
        assert!(q.dequant_elem(f, 0x0, 255).is_nan());
        let g = ProfileId::Ggml.spec();
        assert_eq!(g.dequant_elem(f, 0x1, 255), 2f32.powi(127));
        assert_eq!(g.dequant_elem(f, 0x7, 255), f32::INFINITY);
        assert_eq!(g.dequant_elem(f, 0x0, 255), 0.0);
        assert!(ProfileId::Contract
            .spec()
            .dequant_elem(f, 0x1, 255)
            .is_nan());
        // Elsewhere the contract's decoding: byte 0 is 2^-127.
        assert_eq!(q.dequant_elem(f, 0x2, 0), 2f32.powi(-127));
    }

    /// A block Quark only fake-quantizes (floor scale 2^-129 for amax 2^-127: Q5) has no packed
    /// form; quantize says so, naming the block.
    #[test]
    fn quark_blocks_without_a_byte_are_refused_by_quantize() {
        let mut x = vec![1.0f32; 64];
        x[32] = 2f32.powi(-127);
        for v in &mut x[33..] {
            *v = 0.0;
        }
        let q = ProfileId::Quark.spec();
        let e = q
            .quantize(MxFormat::Fp4E2M1, ScaleMode::Floor, &x, &[2, 32])
            .unwrap_err()
            .to_string();
        assert!(e.contains("block 1") && e.contains("qdq"), "{e}");
        let y = q
            .qdq_slice(MxFormat::Fp4E2M1, ScaleMode::Floor, &x, 32)
            .unwrap();
        assert_eq!(y[32], 2f32.powi(-127));
    }
}
