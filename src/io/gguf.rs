//! llama.cpp GGUF files: the MXFP4 MoE experts of gpt-oss (`blk.N.ffn_{gate,up,down}_exps`).
//!
//! File layout (ggml `docs/gguf.md`, versions 2 and 3): magic `GGUF`, u32 version, u64 tensor
//! count, u64 key/value count; key/values (`gguf_string` = u64 length + UTF-8; u32 value type:
//! 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 type, u64
//! count, values), 10 u64, 11 i64, 12 f64); tensor infos (name, u32 n_dims, u64 dims with
//! `ne[0]` the innermost, u32 ggml type, u64 offset into the data section); the data section
//! starts at the next multiple of `general.alignment` (default 32).
//!
//! ggml type MXFP4 is 39 (`ggml.h`): blocks of 32 elements, 17 bytes: `e` (E8M0 byte, scale
//! `2^(e-127)`: ggml multiplies `kvalues_mxfp4` = doubled E2M1 values by
//! `GGML_E8M0_TO_FP32_HALF(e)` = `2^(e-128)`, the same product) then `qs[16]`, where **element
//! j is the low nibble of `qs[j]` and element j+16 its high nibble** (`dequantize_row_mxfp4` in
//! `ggml-quants.c`), not the OCP/gpt-oss order (element 2j low, 2j+1 high of byte j, which
//! llama.cpp's `convert_hf_to_gguf.py` `transform_nibble_layout` converts from). The codes are
//! E2M1 codes in both (`kvalues_mxfp4` is indexed by the code). We repack to OCP order.
//!
//! gpt-oss conversion (`convert_hf_to_gguf.py` `GptOssModel`): the interleaved `gate_up_proj`
//! is split into `ffn_gate_exps` (rows `::2`) and `ffn_up_exps` (rows `1::2`), each `[E, I, H]`
//! (ne = `[H, I, E]`), `ffn_down_exps` `[E, H, I]`; biases `ffn_{gate,up,down}_exps.bias`; the
//! router is `ffn_gate_inp.weight` `[E, H]` (+ `.bias`). We interleave gate/up again (our
//! `swigluoai` layout). One difference remains: ggml reads the E8M0 byte 0xFF as 2^128, the
//! OCP spec as NaN (we keep NaN: NUMERICS.md 2).
//!
//! Over 600 lines: a bounds-checked reader of the whole GGUF header (every value type) and the
//! MXFP4 repacking belong together; most of the length is the checks' error messages.

use super::conventions::{Convention, Key, LayerInfo};
use super::stfile::{list_names, release_range};
use super::{os, IoError, LoadedLayer};
use crate::format::{Bytes, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::{
    Activation, MoeConfig, MoeLayer, MoeWeights, RouterConfig, RouterWeights, Scoring,
};
use crate::scheme::Scheme;
use memmap2::Mmap;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// ggml tensor types we read.
pub const GGML_F32: u32 = 0;
pub const GGML_F16: u32 = 1;
pub const GGML_BF16: u32 = 30;
pub const GGML_MXFP4: u32 = 39;
/// Bytes of one ggml MXFP4 block (1 scale byte + 16 code bytes).
pub const MXFP4_BLOCK_BYTES: usize = 17;

/// Whether a file starts with the GGUF magic.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    // Only regular files are opened (opening a FIFO would block; the safetensors reader then
    // refuses it with what it is).
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut m = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut m))
        .is_ok()
        && &m == b"GGUF"
}

/// A scalar metadata value (arrays are skipped).
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(String),
}

#[derive(Clone, Debug)]
struct TensorInfo {
    /// ggml dims, `ne[0]` innermost.
    ne: Vec<usize>,
    ty: u32,
    /// Absolute byte offset in the file.
    start: usize,
}

/// A GGUF file, memory-mapped, its header parsed.
pub struct GgufFile {
    pub path: String,
    map: Arc<Mmap>,
    pub kv: HashMap<String, GgufValue>,
    tensors: HashMap<String, TensorInfo>,
    names: Vec<String>,
}

struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
    path: &'a str,
}

impl<'a> Cur<'a> {
    fn err(&self, msg: String) -> IoError {
        IoError::Corrupt {
            path: self.path.to_string(),
            msg: format!("GGUF at byte {}: {msg}", self.pos),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], IoError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| self.err(format!("{n} bytes needed, the file ends first")))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, IoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, IoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String, IoError> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| self.err(format!("string length {n}")))?;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| self.err("a string is not UTF-8".into()))
    }
    /// A value of type `t`; arrays are walked and dropped.
    fn value(&mut self, t: u32, depth: u32) -> Result<Option<GgufValue>, IoError> {
        let v = match t {
            0 => GgufValue::Int(self.take(1)?[0] as i128),
            1 => GgufValue::Int(self.take(1)?[0] as i8 as i128),
            2 => GgufValue::Int(u16::from_le_bytes(self.take(2)?.try_into().unwrap()) as i128),
            3 => GgufValue::Int(i16::from_le_bytes(self.take(2)?.try_into().unwrap()) as i128),
            4 => GgufValue::Int(self.u32()? as i128),
            5 => GgufValue::Int(self.u32()? as i32 as i128),
            6 => GgufValue::Float(f32::from_le_bytes(self.take(4)?.try_into().unwrap()) as f64),
            7 => GgufValue::Bool(self.take(1)?[0] != 0),
            8 => GgufValue::Str(self.string()?),
            9 => {
                if depth > 4 {
                    return Err(self.err("arrays nested deeper than 4".into()));
                }
                let et = self.u32()?;
                let n = self.u64()?;
                // Each element takes at least one byte: a count past the file's end is corrupt.
                if n > (self.b.len() - self.pos) as u64 {
                    return Err(self.err(format!("array of {n} elements past the end")));
                }
                for _ in 0..n {
                    self.value(et, depth + 1)?;
                }
                return Ok(None);
            }
            10 => GgufValue::Int(self.u64()? as i128),
            11 => GgufValue::Int(self.u64()? as i64 as i128),
            12 => GgufValue::Float(f64::from_le_bytes(self.take(8)?.try_into().unwrap())),
            t => return Err(self.err(format!("unknown value type {t}"))),
        };
        Ok(Some(v))
    }
}

/// Bytes of a tensor of type `ty` with dims `ne`, for the types we read.
fn tensor_bytes(ty: u32, ne: &[usize]) -> Option<usize> {
    let n = ne.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    match ty {
        GGML_F32 => n.checked_mul(4),
        GGML_F16 | GGML_BF16 => n.checked_mul(2),
        GGML_MXFP4 => (ne.first()? % BLOCK == 0).then(|| n / BLOCK * MXFP4_BLOCK_BYTES),
        _ => None,
    }
}

fn type_name(ty: u32) -> String {
    match ty {
        GGML_F32 => "F32".into(),
        GGML_F16 => "F16".into(),
        GGML_BF16 => "BF16".into(),
        GGML_MXFP4 => "MXFP4".into(),
        2 => "Q4_0".into(),
        8 => "Q8_0".into(),
        t => format!("ggml type {t}"),
    }
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile, IoError> {
        let p = path.display().to_string();
        super::output::check_input(path)?;
        let file = std::fs::File::open(path).map_err(|e| os(path, e))?;
        // SAFETY: read-only mapping (see `StFile`).
        let map = Arc::new(unsafe { Mmap::map(&file) }.map_err(|e| os(path, e))?);
        let mut c = Cur {
            b: &map,
            pos: 0,
            path: &p,
        };
        if c.take(4)? != b"GGUF" {
            return Err(c.err("not a GGUF file (magic)".into()));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(c.err(format!("GGUF version {version}, expected 2 or 3")));
        }
        let nt = c.u64()?;
        let nkv = c.u64()?;
        // Every tensor info and key/value takes at least 8 bytes.
        let room = (map.len() / 8) as u64;
        if nt > room || nkv > room {
            return Err(c.err(format!("{nt} tensors / {nkv} keys do not fit in the file")));
        }
        let mut kv = HashMap::new();
        for _ in 0..nkv {
            let k = c.string()?;
            let t = c.u32()?;
            if let Some(v) = c.value(t, 0)? {
                kv.insert(k, v);
            }
        }
        let mut infos: Vec<(String, Vec<usize>, u32, u64)> = Vec::new();
        for _ in 0..nt {
            let name = c.string()?;
            let nd = c.u32()?;
            if nd == 0 || nd > 4 {
                return Err(c.err(format!(
                    "tensor '{name}': {nd} dimensions (ggml has 1 to 4)"
                )));
            }
            let mut ne = Vec::new();
            for _ in 0..nd {
                let d = c.u64()?;
                ne.push(
                    usize::try_from(d).map_err(|_| c.err(format!("tensor '{name}': dim {d}")))?,
                );
            }
            let ty = c.u32()?;
            let off = c.u64()?;
            infos.push((name, ne, ty, off));
        }
        let align = match kv.get("general.alignment") {
            Some(GgufValue::Int(a)) if *a > 0 && (*a as u64).is_power_of_two() => *a as usize,
            None => 32,
            Some(v) => {
                return Err(c.err(format!(
                    "general.alignment = {v:?}, expected a power of two"
                )))
            }
        };
        let data = c.pos.div_ceil(align) * align;
        let mut tensors = HashMap::new();
        for (name, ne, ty, off) in infos {
            let start = usize::try_from(off)
                .ok()
                .and_then(|o| o.checked_add(data))
                .ok_or_else(|| c.err(format!("tensor '{name}': offset {off}")))?;
            if let Some(n) = tensor_bytes(ty, &ne) {
                if start.checked_add(n).is_none_or(|e| e > map.len()) {
                    return Err(IoError::Corrupt {
                        path: p.clone(),
                        msg: format!(
                            "tensor '{name}' ({} {ne:?}, {n} bytes at {start}) runs past the end of the file ({} bytes)",
                            type_name(ty),
                            map.len()
                        ),
                    });
                }
            }
            if tensors
                .insert(name.clone(), TensorInfo { ne, ty, start })
                .is_some()
            {
                return Err(IoError::Corrupt {
                    path: p.clone(),
                    msg: format!("tensor '{name}' appears twice"),
                });
            }
        }
        let mut names: Vec<String> = tensors.keys().cloned().collect();
        names.sort();
        Ok(GgufFile {
            path: p,
            map,
            kv,
            tensors,
            names,
        })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn int(&self, key: &str) -> Option<usize> {
        match self.kv.get(key) {
            Some(GgufValue::Int(v)) if *v >= 0 => usize::try_from(*v).ok(),
            _ => None,
        }
    }

    fn arch(&self) -> String {
        match self.kv.get("general.architecture") {
            Some(GgufValue::Str(s)) => s.clone(),
            _ => String::new(),
        }
    }

    fn info(&self, name: &str) -> Result<&TensorInfo, IoError> {
        self.tensors.get(name).ok_or_else(|| IoError::Missing {
            path: self.path.clone(),
            tensor: name.into(),
            hint: format!(" (the file has: {})", list_names(&self.names)),
        })
    }

    fn bytes(&self, name: &str, t: &TensorInfo) -> Result<&[u8], IoError> {
        let n = tensor_bytes(t.ty, &t.ne).ok_or_else(|| IoError::Dtype {
            path: self.path.clone(),
            tensor: name.into(),
            expected: "F32, F16, BF16 or MXFP4".into(),
            got: type_name(t.ty),
        })?;
        Ok(&self.map[t.start..t.start + n])
    }

    /// A float tensor (F32, F16, BF16) as f32, with its ggml dims.
    fn floats(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), IoError> {
        let t = self.info(name)?;
        let b = self.bytes(name, t)?;
        let v = match t.ty {
            GGML_F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            GGML_F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            GGML_BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            ty => {
                return Err(IoError::Dtype {
                    path: self.path.clone(),
                    tensor: name.into(),
                    expected: "F32, F16 or BF16".into(),
                    got: type_name(ty),
                })
            }
        };
        Ok((v, t.ne.clone()))
    }

    fn expert_dims(&self, name: &str) -> Result<[usize; 3], IoError> {
        let t = self.info(name)?;
        if t.ty != GGML_MXFP4 {
            return Err(IoError::Dtype {
                path: self.path.clone(),
                tensor: name.into(),
                expected: "MXFP4 (ggml type 39): only MXFP4 experts load".into(),
                got: type_name(t.ty),
            });
        }
        if t.ne.len() != 3 || t.ne[0] % BLOCK != 0 {
            return Err(IoError::Shape {
                path: self.path.clone(),
                tensor: name.into(),
                expected: "ggml ne [K, N, E] with K a multiple of 32".into(),
                got: t.ne.clone(),
            });
        }
        Ok([t.ne[0], t.ne[1], t.ne[2]])
    }

    /// The MoE layers: blocks `N` with `blk.N.ffn_gate_exps.weight`.
    pub fn layers(&self, scheme: Option<Scheme>) -> Result<Vec<LayerInfo>, IoError> {
        if let Some(s) = scheme {
            if s != Scheme::new(MxFormat::Fp4E2M1, None) {
                return Err(IoError::Invalid {
                    path: self.path.clone(),
                    msg: format!("--scheme {s}: GGUF MXFP4 experts are w_mxfp4"),
                });
            }
        }
        let mut blocks: Vec<usize> = self
            .names
            .iter()
            .filter_map(|n| {
                n.strip_prefix("blk.")?
                    .strip_suffix(".ffn_gate_exps.weight")?
                    .parse()
                    .ok()
            })
            .collect();
        blocks.sort_unstable();
        if blocks.is_empty() {
            return Err(IoError::Invalid {
                path: self.path.clone(),
                msg: format!(
                    "no MoE layer found (looked for blk.N.ffn_gate_exps.weight). Tensors: {}",
                    list_names(&self.names)
                ),
            });
        }
        let arch = self.arch();
        let gpt_oss = arch == "gpt-oss";
        blocks
            .into_iter()
            .map(|b| {
                let [h, i, e] = self.expert_dims(&format!("blk.{b}.ffn_gate_exps.weight"))?;
                let up = format!("blk.{b}.ffn_up_exps.weight");
                let down = format!("blk.{b}.ffn_down_exps.weight");
                if self.expert_dims(&up)? != [h, i, e] {
                    return Err(IoError::Shape {
                        path: self.path.clone(),
                        tensor: up.clone(),
                        expected: format!("ne [{h}, {i}, {e}] like ffn_gate_exps"),
                        got: self.info(&up)?.ne.clone(),
                    });
                }
                if self.expert_dims(&down)? != [i, h, e] {
                    return Err(IoError::Shape {
                        path: self.path.clone(),
                        tensor: down.clone(),
                        expected: format!("ne [I = {i}, H = {h}, E = {e}]"),
                        got: self.info(&down)?.ne.clone(),
                    });
                }
                let top = self.int(&format!("{arch}.expert_used_count"));
                let router = if gpt_oss {
                    RouterConfig {
                        scoring: Scoring::TopkSoftmax,
                        top_k: top.unwrap_or(4.min(e)),
                        renormalize: false,
                        ..RouterConfig::default()
                    }
                } else {
                    RouterConfig {
                        top_k: top.unwrap_or(2.min(e)),
                        ..RouterConfig::default()
                    }
                };
                let config = MoeConfig {
                    scheme: Scheme::new(MxFormat::Fp4E2M1, None),
                    activation: if gpt_oss {
                        Activation::SwigluOai
                    } else {
                        Activation::Silu
                    },
                    router,
                    act_scale_mode: ScaleMode::default(),
                    n_experts: e,
                    local_experts: e,
                    hidden: h,
                    inter: i,
                };
                let bytes = e * (2 * i * (h / 2 + h / BLOCK) + h * (i / 2 + i / BLOCK));
                Ok(LayerInfo {
                    index: b,
                    name: format!("blk.{b}"),
                    convention: Convention::GgufGptOss,
                    scheme_from: format!("GGUF MXFP4 experts ({arch})"),
                    bytes,
                    router: self
                        .tensors
                        .contains_key(&format!("blk.{b}.ffn_gate_inp.weight")),
                    config,
                    key: Key::Gguf(b),
                })
            })
            .collect()
    }

    /// Repack one MXFP4 expert stack `[E, N, K]` into OCP order in `data` / `scales`, which
    /// hold `[E, N * stride, K]`: row r of expert e goes to row `r * stride + offset` (stride 2
    /// interleaves gate and up). Experts run in parallel; the mapped pages are dropped after.
    fn repack(
        &self,
        name: &str,
        data: &mut [u8],
        scales: &mut [u8],
        stride: usize,
        offset: usize,
    ) -> Result<(), IoError> {
        use rayon::prelude::*;
        let t = self.info(name)?;
        let [k, n, e] = self.expert_dims(name)?;
        let src = self.bytes(name, t)?;
        let nb = k / BLOCK;
        let row_in = nb * MXFP4_BLOCK_BYTES;
        let rows_out = n * stride;
        data.par_chunks_mut(rows_out * k / 2)
            .zip(scales.par_chunks_mut(rows_out * nb))
            .zip(src.par_chunks(n * row_in))
            .take(e)
            .for_each(|((dx, sx), ex)| {
                for (r, row) in ex.chunks_exact(row_in).enumerate() {
                    let d = r * stride + offset;
                    let out = &mut dx[d * k / 2..(d + 1) * k / 2];
                    let sc = &mut sx[d * nb..(d + 1) * nb];
                    for ((blk, o), s) in row
                        .chunks_exact(MXFP4_BLOCK_BYTES)
                        .zip(out.chunks_exact_mut(16))
                        .zip(sc.iter_mut())
                    {
                        *s = blk[0];
                        let q = &blk[1..];
                        // ggml: element j < 16 is the low nibble of q[j], element j + 16 its
                        // high nibble; OCP: elements 2b (low) and 2b + 1 (high) in byte b.
                        for b in 0..8 {
                            o[b] = (q[2 * b] & 0x0F) | (q[2 * b + 1] << 4);
                            o[b + 8] = (q[2 * b] >> 4) | (q[2 * b + 1] & 0xF0);
                        }
                    }
                }
            });
        release_range(&self.map, t.start..t.start + src.len());
        Ok(())
    }

    /// Load a layer [`GgufFile::layers`] described.
    pub fn load(&self, info: &LayerInfo) -> Result<LoadedLayer, IoError> {
        let Key::Gguf(b) = info.key else {
            return Err(IoError::Invalid {
                path: self.path.clone(),
                msg: format!("layer '{}' is not a GGUF layer", info.name),
            });
        };
        let c = &info.config;
        let (e, h, i) = (c.local_experts, c.hidden, c.inter);
        // The description must be this file's (the repacking below indexes by it).
        for (t, want) in [("gate", [h, i, e]), ("up", [h, i, e]), ("down", [i, h, e])] {
            let n = format!("blk.{b}.ffn_{t}_exps.weight");
            if self.expert_dims(&n)? != want {
                return Err(IoError::Invalid {
                    path: self.path.clone(),
                    msg: format!("tensor '{n}' does not match the layer description {want:?}"),
                });
            }
        }
        let mut d13 = vec![0u8; e * 2 * i * h / 2];
        let mut s13 = vec![0u8; e * 2 * i * h / BLOCK];
        // gate rows to the even rows, up rows to the odd rows (swigluoai interleave).
        self.repack(
            &format!("blk.{b}.ffn_gate_exps.weight"),
            &mut d13,
            &mut s13,
            2,
            0,
        )?;
        self.repack(
            &format!("blk.{b}.ffn_up_exps.weight"),
            &mut d13,
            &mut s13,
            2,
            1,
        )?;
        let mut d2 = vec![0u8; e * h * i / 2];
        let mut s2 = vec![0u8; e * h * i / BLOCK];
        self.repack(
            &format!("blk.{b}.ffn_down_exps.weight"),
            &mut d2,
            &mut s2,
            1,
            0,
        )?;
        let inv = |m: String| IoError::Invalid {
            path: self.path.clone(),
            msg: m,
        };
        let w13 = MxTensor::new(
            MxFormat::Fp4E2M1,
            vec![e, 2 * i, h],
            Bytes::from(d13),
            Bytes::from(s13),
        )
        .map_err(|x| inv(x.to_string()))?;
        let w2 = MxTensor::new(
            MxFormat::Fp4E2M1,
            vec![e, h, i],
            Bytes::from(d2),
            Bytes::from(s2),
        )
        .map_err(|x| inv(x.to_string()))?;
        let opt = |n: String, ne: Vec<usize>| -> Result<Option<Vec<f32>>, IoError> {
            if !self.tensors.contains_key(&n) {
                return Ok(None);
            }
            let (v, got) = self.floats(&n)?;
            if got != ne {
                return Err(IoError::Shape {
                    path: self.path.clone(),
                    tensor: n,
                    expected: format!("ggml ne {ne:?}"),
                    got,
                });
            }
            Ok(Some(v))
        };
        let gb = opt(format!("blk.{b}.ffn_gate_exps.bias"), vec![i, e])?;
        let ub = opt(format!("blk.{b}.ffn_up_exps.bias"), vec![i, e])?;
        let w13_bias = match (gb, ub) {
            (Some(g), Some(u)) => {
                let mut v = vec![0f32; e * 2 * i];
                for x in 0..e {
                    for r in 0..i {
                        v[x * 2 * i + 2 * r] = g[x * i + r];
                        v[x * 2 * i + 2 * r + 1] = u[x * i + r];
                    }
                }
                Some(v)
            }
            (None, None) => None,
            _ => {
                return Err(inv(format!(
                    "blk.{b}: ffn_gate_exps.bias and ffn_up_exps.bias come together"
                )))
            }
        };
        let w2_bias = opt(format!("blk.{b}.ffn_down_exps.bias"), vec![h, e])?;
        let router = match opt(format!("blk.{b}.ffn_gate_inp.weight"), vec![h, e])? {
            Some(w) => {
                let bias = opt(format!("blk.{b}.ffn_gate_inp.bias"), vec![e])?;
                Some(RouterWeights::new(w, bias, e, h).map_err(|x| inv(x.to_string()))?)
            }
            None => None,
        };
        let layer = MoeLayer {
            config: c.clone(),
            weights: MoeWeights {
                w13,
                w2,
                w13_bias,
                w2_bias,
                e_score_correction_bias: None,
                expert_map: None,
            },
        };
        let (s13, s2) = (
            format!("blk.{b}.ffn_{{gate,up}}_exps.weight (scales)"),
            format!("blk.{b}.ffn_down_exps.weight (scales)"),
        );
        let (b13, b2) = (
            format!("blk.{b}.ffn_{{gate,up}}_exps.bias"),
            format!("blk.{b}.ffn_down_exps.bias"),
        );
        let warnings = super::validate::check_layer(
            &self.path,
            &layer,
            &super::validate::LayerNames {
                w13_scale: &s13,
                w2_scale: &s2,
                w13_bias: &b13,
                w2_bias: &b2,
                expert_map: "",
                correction_bias: "",
            },
            None,
        )?;
        layer
            .validate()
            .map_err(|x| inv(format!("layer blk.{b}: {x}")))?;
        Ok(LoadedLayer {
            layer,
            w13_orig: None,
            w2_orig: None,
            router,
            warnings,
        })
    }
}
