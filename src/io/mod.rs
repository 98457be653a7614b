//! safetensors I/O: MX tensors, layer bundles (vLLM/Quark names), gpt-oss checkpoints, token
//! batches and MoE results (ARCHITECTURE.md "File formats").
//!
//! Every error names the file, the tensor and what was expected. Writes are atomic: the bytes go
//! to a temporary file in the target's folder, which is renamed over the target only once
//! complete, so a failed run leaves no partial output.
//!
//! Over 600 lines: one reader/writer per file kind over one `StFile`; it splits by file kind
//! (MX tensors, layer bundles, gpt-oss, batches, results) with the model-directory loader.

mod floats;
pub use floats::{float_tensors, FloatTensor};

use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::{Activation, MoeConfig, MoeLayer, MoeWeights, RouterConfig, Routing, Scoring};
use crate::scheme::Scheme;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// I/O errors: which file, which tensor, what was expected.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    #[error("{path}: {source}")]
    Os {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a valid safetensors file ({msg})")]
    Corrupt { path: String, msg: String },
    #[error("{path}: missing tensor '{tensor}'{hint}")]
    Missing {
        path: String,
        tensor: String,
        hint: String,
    },
    #[error("{path}: tensor '{tensor}' has dtype {got}, expected {expected}")]
    Dtype {
        path: String,
        tensor: String,
        expected: String,
        got: String,
    },
    #[error("{path}: tensor '{tensor}' has shape {got:?}, expected {expected}")]
    Shape {
        path: String,
        tensor: String,
        expected: String,
        got: Vec<usize>,
    },
    #[error("{path}: metadata '{key}': {msg}")]
    Meta {
        path: String,
        key: String,
        msg: String,
    },
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
}

fn os(path: &Path, source: std::io::Error) -> IoError {
    IoError::Os {
        path: path.display().to_string(),
        source,
    }
}

/// Write `bytes` to `path` atomically (temp file in the same folder + rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".mxmoe-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| os(path, e))?;
    tmp.write_all(bytes).map_err(|e| os(path, e))?;
    tmp.as_file().sync_all().map_err(|e| os(path, e))?;
    // tempfile creates 0600; an output file should get the usual 0644.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    tmp.persist(path).map_err(|e| os(path, e.error))?;
    Ok(())
}

/// A tensor to write: name, dtype, shape, little-endian bytes.
pub struct OutTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl OutTensor {
    pub fn f32(name: impl Into<String>, shape: Vec<usize>, v: &[f32]) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::F32,
            shape,
            bytes: bytemuck::cast_slice(v).to_vec(),
        }
    }
    pub fn i32(name: impl Into<String>, shape: Vec<usize>, v: &[i32]) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::I32,
            shape,
            bytes: bytemuck::cast_slice(v).to_vec(),
        }
    }
    pub fn u8(name: impl Into<String>, shape: Vec<usize>, v: &[u8]) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::U8,
            shape,
            bytes: v.to_vec(),
        }
    }
}

/// Serialize tensors + metadata and write atomically.
pub fn save(
    path: &Path,
    tensors: &[OutTensor],
    meta: HashMap<String, String>,
) -> Result<(), IoError> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
                .map(|v| (t.name.clone(), v))
                .map_err(|e| IoError::Invalid {
                    path: path.display().to_string(),
                    msg: format!("tensor '{}': {e}", t.name),
                })
        })
        .collect::<Result<_, _>>()?;
    let meta = if meta.is_empty() { None } else { Some(meta) };
    let bytes = safetensors::serialize(views, meta).map_err(|e| IoError::Invalid {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    write_atomic(path, &canonical_header(bytes))
}

/// Rewrite a serialized file's JSON header with sorted keys (the metadata is a `HashMap`, whose
/// order changes from run to run), so the same tensors always give the same bytes. The header
/// stays space-padded to a multiple of 8 bytes; data offsets are relative to the data section,
/// which does not move.
fn canonical_header(bytes: Vec<u8>) -> Vec<u8> {
    use std::collections::BTreeMap;
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8-byte length")) as usize;
    let Ok(mut header) =
        serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(&bytes[8..8 + n])
    else {
        return bytes;
    };
    if let Some(m) = header.get_mut("__metadata__") {
        if let Ok(sorted) = serde_json::from_value::<BTreeMap<String, String>>(m.clone()) {
            *m = serde_json::to_value(sorted).expect("strings serialize");
        }
    }
    let mut h = serde_json::to_vec(&header).expect("a JSON value serializes");
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + bytes.len() - 8 - n);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

/// A safetensors file read into memory, with typed accessors that produce clear errors.
pub struct StFile {
    pub path: String,
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
}

impl StFile {
    pub fn open(path: &Path) -> Result<StFile, IoError> {
        let bytes = std::fs::read(path).map_err(|e| os(path, e))?;
        let p = path.display().to_string();
        let (_, md) = SafeTensors::read_metadata(&bytes).map_err(|e| IoError::Corrupt {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        // Validate the whole header/data layout once, so later accessors cannot fail on it.
        SafeTensors::deserialize(&bytes).map_err(|e| IoError::Corrupt {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        let meta = md.metadata().clone().unwrap_or_default();
        Ok(StFile {
            path: p,
            bytes,
            meta,
        })
    }

    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("validated in open")
    }

    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.st().names().into_iter().map(String::from).collect();
        n.sort();
        n
    }

    pub fn has(&self, name: &str) -> bool {
        self.st().tensor(name).is_ok()
    }

    pub fn meta(&self, key: &str) -> Option<&str> {
        self.meta.get(key).map(String::as_str)
    }

    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.meta
    }

    /// Parse a metadata value, with a clear error naming the key.
    pub fn meta_parse<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, IoError>
    where
        T::Err: std::fmt::Display,
    {
        match self.meta(key) {
            None => Ok(None),
            Some(v) => v.parse::<T>().map(Some).map_err(|e| IoError::Meta {
                path: self.path.clone(),
                key: key.into(),
                msg: format!("'{v}': {e}"),
            }),
        }
    }

    fn view(&self, name: &str) -> Result<TensorView<'_>, IoError> {
        self.st().tensor(name).map_err(|_| IoError::Missing {
            path: self.path.clone(),
            tensor: name.into(),
            hint: format!(" (the file has: {})", self.names().join(", ")),
        })
    }

    pub fn dtype(&self, name: &str) -> Result<Dtype, IoError> {
        Ok(self.view(name)?.dtype())
    }

    pub fn shape(&self, name: &str) -> Result<Vec<usize>, IoError> {
        Ok(self.view(name)?.shape().to_vec())
    }

    /// A float tensor (f32, bf16 or f16 — widened exactly to f32) and its shape.
    pub fn floats(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), IoError> {
        let v = self.view(name)?;
        let d = v.data();
        let out: Vec<f32> = match v.dtype() {
            Dtype::F32 => d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            Dtype::BF16 => d
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            Dtype::F16 => d
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            other => {
                return Err(IoError::Dtype {
                    path: self.path.clone(),
                    tensor: name.into(),
                    expected: "F32, BF16 or F16".into(),
                    got: format!("{other:?}"),
                })
            }
        };
        Ok((out, v.shape().to_vec()))
    }

    /// A u8 tensor and its shape.
    pub fn bytes_u8(&self, name: &str) -> Result<(Vec<u8>, Vec<usize>), IoError> {
        let v = self.view(name)?;
        if v.dtype() != Dtype::U8 {
            return Err(IoError::Dtype {
                path: self.path.clone(),
                tensor: name.into(),
                expected: "U8".into(),
                got: format!("{:?}", v.dtype()),
            });
        }
        Ok((v.data().to_vec(), v.shape().to_vec()))
    }

    /// An integer tensor (i32 or i64) as i64.
    pub fn ints(&self, name: &str) -> Result<(Vec<i64>, Vec<usize>), IoError> {
        let v = self.view(name)?;
        let d = v.data();
        let out = match v.dtype() {
            Dtype::I32 => d
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
            Dtype::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            other => {
                return Err(IoError::Dtype {
                    path: self.path.clone(),
                    tensor: name.into(),
                    expected: "I32 or I64".into(),
                    got: format!("{other:?}"),
                })
            }
        };
        Ok((out, v.shape().to_vec()))
    }

    fn shape_err(&self, tensor: &str, expected: String, got: Vec<usize>) -> IoError {
        IoError::Shape {
            path: self.path.clone(),
            tensor: tensor.into(),
            expected,
            got,
        }
    }

    /// An MX tensor stored as `name` (u8 packed, `[.., packed(K)]`) + `name_scale`
    /// (u8 E8M0, `[.., K/32]`).
    pub fn mx(&self, name: &str, format: MxFormat) -> Result<MxTensor, IoError> {
        let (data, pshape) = self.bytes_u8(name)?;
        let sname = format!("{name}_scale");
        let (scales, sshape) = self.bytes_u8(&sname)?;
        let Some((&pk, lead)) = pshape.split_last() else {
            return Err(self.shape_err(name, "at least one dimension".into(), pshape));
        };
        let bb = format.spec().block_bytes();
        if pk == 0 || pk % bb != 0 {
            return Err(self.shape_err(
                name,
                format!(
                    "a last dimension that is a multiple of {bb} bytes (one 32-element {format} block)"
                ),
                pshape.clone(),
            ));
        }
        let k = pk / bb * BLOCK;
        let mut want_s = lead.to_vec();
        want_s.push(k / BLOCK);
        if sshape != want_s {
            return Err(self.shape_err(
                &sname,
                format!("{want_s:?} (one E8M0 byte per 32 of K = {k})"),
                sshape,
            ));
        }
        let mut shape = lead.to_vec();
        shape.push(k);
        MxTensor::new(format, shape, data, scales).map_err(|e| IoError::Invalid {
            path: self.path.clone(),
            msg: format!("tensor '{name}': {e}"),
        })
    }
}

fn mx_out(name: &str, t: &MxTensor) -> [OutTensor; 2] {
    let lead = &t.shape[..t.shape.len() - 1];
    let mut ps = lead.to_vec();
    ps.push(t.row_bytes());
    let mut ss = lead.to_vec();
    ss.push(t.k() / BLOCK);
    [
        OutTensor::u8(name, ps, &t.data),
        OutTensor::u8(format!("{name}_scale"), ss, &t.scales),
    ]
}

/// Save MX tensors (all of one format) with metadata `format` and `scale_mode`.
pub fn save_mx(
    path: &Path,
    tensors: &[(String, MxTensor)],
    mode: ScaleMode,
) -> Result<(), IoError> {
    save_mx_profile(path, tensors, mode, crate::format::ProfileId::Contract)
}

/// [`save_mx`] for tensors quantized under a compatibility profile: a non-default profile is
/// recorded in the metadata (`profile`), so that `dequantize` reads the layout back.
pub fn save_mx_profile(
    path: &Path,
    tensors: &[(String, MxTensor)],
    mode: ScaleMode,
    profile: crate::format::ProfileId,
) -> Result<(), IoError> {
    let mut out = Vec::new();
    let mut meta = HashMap::new();
    if profile != crate::format::ProfileId::Contract {
        meta.insert("profile".into(), profile.name().into());
    }
    if let Some((_, t)) = tensors.first() {
        meta.insert("format".into(), t.format.name().into());
    }
    meta.insert("scale_mode".into(), mode.name().into());
    for (n, t) in tensors {
        out.extend(mx_out(n, t));
    }
    save(path, &out, meta)
}

/// The MX tensors of a file, by name, and the file's scale mode (when it records one).
pub type MxTensors = (Vec<(String, MxTensor)>, Option<ScaleMode>);

/// Load every MX tensor of a quantized file: tensors `T` with a `T_scale` companion.
pub fn load_mx(path: &Path) -> Result<MxTensors, IoError> {
    let f = StFile::open(path)?;
    let format: MxFormat = match f.meta_parse::<MxFormat>("format")? {
        Some(x) => x,
        None => {
            return Err(IoError::Meta {
                path: f.path.clone(),
                key: "format".into(),
                msg: "missing (a quantized file names its MX format in the metadata)".into(),
            })
        }
    };
    let mode = f.meta_parse::<ScaleMode>("scale_mode")?;
    let names = f.names();
    let mut out = Vec::new();
    for n in &names {
        if n.ends_with("_scale") || !names.contains(&format!("{n}_scale")) {
            continue;
        }
        out.push((n.clone(), f.mx(n, format)?));
    }
    if out.is_empty() {
        return Err(IoError::Invalid {
            path: f.path.clone(),
            msg: "no quantized tensors (a tensor T with a T_scale companion) found".into(),
        });
    }
    Ok((out, mode))
}

/// A token batch: `hidden_states` `[M, H]`, `router_logits` `[M, E]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBatch {
    pub hidden: Vec<f32>,
    pub logits: Vec<f32>,
    pub m: usize,
    pub hidden_size: usize,
    pub n_experts: usize,
}

pub fn load_batch(path: &Path) -> Result<TokenBatch, IoError> {
    let f = StFile::open(path)?;
    let (hidden, hs) = f.floats("hidden_states")?;
    if hs.len() != 2 || hs[0] == 0 || hs[1] == 0 {
        return Err(f.shape_err("hidden_states", "[M, H] with M, H >= 1".into(), hs));
    }
    let (logits, ls) = f.floats("router_logits")?;
    if ls.len() != 2 || ls[0] != hs[0] || ls[1] == 0 {
        return Err(f.shape_err("router_logits", format!("[M = {}, E]", hs[0]), ls));
    }
    Ok(TokenBatch {
        hidden,
        logits,
        m: hs[0],
        hidden_size: hs[1],
        n_experts: ls[1],
    })
}

pub fn save_batch(path: &Path, b: &TokenBatch) -> Result<(), IoError> {
    save(
        path,
        &[
            OutTensor::f32("hidden_states", vec![b.m, b.hidden_size], &b.hidden),
            OutTensor::f32("router_logits", vec![b.m, b.n_experts], &b.logits),
        ],
        HashMap::new(),
    )
}

/// Save a MoE result: `output` f32 `[M, H]`, `topk_ids` i32 `[M, k]`, `topk_weights` f32 `[M, k]`.
pub fn save_result(
    path: &Path,
    output: &[f32],
    hidden: usize,
    routing: &Routing,
    meta: HashMap<String, String>,
) -> Result<(), IoError> {
    let m = output.len() / hidden.max(1);
    let k = routing.top_k;
    save(
        path,
        &[
            OutTensor::f32("output", vec![m, hidden], output),
            OutTensor::i32("topk_ids", vec![m, k], &routing.topk_ids),
            OutTensor::f32("topk_weights", vec![m, k], &routing.topk_weights),
        ],
        meta,
    )
}

/// A MoE result read back.
#[derive(Clone, Debug)]
pub struct MoeResult {
    pub output: Vec<f32>,
    pub m: usize,
    pub hidden: usize,
    pub routing: Routing,
}

pub fn load_result(path: &Path) -> Result<MoeResult, IoError> {
    let f = StFile::open(path)?;
    let (output, os_) = f.floats("output")?;
    if os_.len() != 2 {
        return Err(f.shape_err("output", "[M, H]".into(), os_));
    }
    let (ids, is) = f.ints("topk_ids")?;
    let (w, ws) = f.floats("topk_weights")?;
    if is.len() != 2 || is[0] != os_[0] || ws != is {
        return Err(f.shape_err(
            "topk_ids",
            format!("[M = {}, k], same as topk_weights {ws:?}", os_[0]),
            is,
        ));
    }
    Ok(MoeResult {
        output,
        m: os_[0],
        hidden: os_[1],
        routing: Routing {
            top_k: is[1],
            topk_ids: ids.into_iter().map(|v| v as i32).collect(),
            topk_weights: w,
        },
    })
}

/// A loaded layer, with its unquantized weights when the file carries them
/// (`w13_weight_orig` `[E, 2I, H]`, `w2_weight_orig` `[E, H, I]`, any float dtype).
#[derive(Clone, Debug)]
pub struct LoadedLayer {
    pub layer: MoeLayer,
    pub w13_orig: Option<Vec<f32>>,
    pub w2_orig: Option<Vec<f32>>,
}

/// Save a layer bundle with the vLLM/Quark names and the routing keys as metadata.
pub fn save_layer(
    path: &Path,
    l: &MoeLayer,
    orig: Option<(&[f32], &[f32])>,
) -> Result<(), IoError> {
    let (e, h, i) = (l.local_experts(), l.config.hidden, l.config.inter);
    let mut t: Vec<OutTensor> = Vec::new();
    t.extend(mx_out("w13_weight", &l.weights.w13));
    t.extend(mx_out("w2_weight", &l.weights.w2));
    if let Some(b) = &l.weights.w13_bias {
        t.push(OutTensor::f32("w13_bias", vec![e, 2 * i], b));
    }
    if let Some(b) = &l.weights.w2_bias {
        t.push(OutTensor::f32("w2_bias", vec![e, h], b));
    }
    if let Some(b) = &l.weights.e_score_correction_bias {
        t.push(OutTensor::f32(
            "e_score_correction_bias",
            vec![l.config.n_experts],
            b,
        ));
    }
    if let Some(m) = &l.weights.expert_map {
        t.push(OutTensor::i32("expert_map", vec![l.config.n_experts], m));
    }
    if let Some((a, b)) = orig {
        t.push(OutTensor::f32("w13_weight_orig", vec![e, 2 * i, h], a));
        t.push(OutTensor::f32("w2_weight_orig", vec![e, h, i], b));
    }
    let r = &l.config.router;
    let mut meta: HashMap<String, String> = [
        ("scheme", l.config.scheme.name()),
        ("activation", l.config.activation.name().to_string()),
        ("top_k", r.top_k.to_string()),
        ("renormalize", r.renormalize.to_string()),
        ("scale_mode", l.config.act_scale_mode.name().to_string()),
        ("scoring", r.scoring.name().to_string()),
        ("routed_scaling_factor", r.routed_scaling_factor.to_string()),
        (
            "apply_router_weight_on_input",
            r.apply_router_weight_on_input.to_string(),
        ),
        ("n_experts", l.config.n_experts.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let (Some(g), Some(tg)) = (r.n_group, r.topk_group) {
        meta.insert("n_group".into(), g.to_string());
        meta.insert("topk_group".into(), tg.to_string());
    }
    save(path, &t, meta)
}

fn parse_bool(f: &StFile, key: &str) -> Result<Option<bool>, IoError> {
    match f.meta(key).map(|s| s.trim().to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if v == "true" || v == "1" => Ok(Some(true)),
        Some(v) if v == "false" || v == "0" => Ok(Some(false)),
        Some(v) => Err(IoError::Meta {
            path: f.path.clone(),
            key: key.into(),
            msg: format!("'{v}' is not true/false"),
        }),
    }
}

/// The gpt-oss expert tensor names found in a file: (prefix, style).
fn gptoss_prefixes(f: &StFile) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for n in f.names() {
        if let Some(p) = n.strip_suffix("gate_up_proj_blocks") {
            out.push((p.to_string(), true)); // Hugging Face names
        } else if let Some(p) = n.strip_suffix("mlp1_weight.blocks") {
            out.push((p.to_string(), false)); // openai/gpt-oss original names
        }
    }
    out
}

/// Load a layer bundle (vLLM/Quark names) or a gpt-oss-style checkpoint holding one layer.
pub fn load_layer(path: &Path) -> Result<LoadedLayer, IoError> {
    let f = StFile::open(path)?;
    if f.has("w13_weight") {
        return load_bundle(&f);
    }
    let pre = gptoss_prefixes(&f);
    match pre.len() {
        0 => Err(IoError::Missing {
            path: f.path.clone(),
            tensor: "w13_weight".into(),
            hint: " (neither a layer bundle with w13_weight/w2_weight nor a gpt-oss checkpoint with *gate_up_proj_blocks)".into(),
        }),
        1 => load_gptoss(&f, &pre[0].0, pre[0].1),
        _ => Err(IoError::Invalid {
            path: f.path.clone(),
            msg: format!(
                "the file holds {} gpt-oss MoE layers ({}); extract one layer first",
                pre.len(),
                pre.iter().map(|p| p.0.as_str()).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

fn router_from_meta(f: &StFile, defaults: RouterConfig) -> Result<RouterConfig, IoError> {
    let mut r = defaults;
    if let Some(k) = f.meta_parse::<usize>("top_k")? {
        r.top_k = k;
    }
    if let Some(b) = parse_bool(f, "renormalize")? {
        r.renormalize = b;
    }
    if let Some(s) = f.meta_parse::<Scoring>("scoring")? {
        r.scoring = s;
    }
    r.n_group = f.meta_parse::<usize>("n_group")?.or(r.n_group);
    r.topk_group = f.meta_parse::<usize>("topk_group")?.or(r.topk_group);
    if let Some(x) = f.meta_parse::<f32>("routed_scaling_factor")? {
        r.routed_scaling_factor = x;
    }
    if let Some(b) = parse_bool(f, "apply_router_weight_on_input")? {
        r.apply_router_weight_on_input = b;
    }
    Ok(r)
}

fn opt_floats(f: &StFile, name: &str, want: &[usize]) -> Result<Option<Vec<f32>>, IoError> {
    if !f.has(name) {
        return Ok(None);
    }
    let (v, s) = f.floats(name)?;
    if s != want {
        return Err(f.shape_err(name, format!("{want:?}"), s));
    }
    Ok(Some(v))
}

fn finish(
    f: &StFile,
    layer: MoeLayer,
    w13_orig: Option<Vec<f32>>,
    w2_orig: Option<Vec<f32>>,
) -> Result<LoadedLayer, IoError> {
    layer.validate().map_err(|e| IoError::Invalid {
        path: f.path.clone(),
        msg: e.to_string(),
    })?;
    Ok(LoadedLayer {
        layer,
        w13_orig,
        w2_orig,
    })
}

fn load_bundle(f: &StFile) -> Result<LoadedLayer, IoError> {
    let scheme: Scheme = f
        .meta_parse::<Scheme>("scheme")?
        .ok_or_else(|| IoError::Meta {
            path: f.path.clone(),
            key: "scheme".into(),
            msg: "missing (e.g. w_mxfp4_a_mxfp4)".into(),
        })?;
    let w13 = f.mx("w13_weight", scheme.weight)?;
    let w2 = f.mx("w2_weight", scheme.weight)?;
    if w13.shape.len() != 3 || w13.shape[1] % 2 != 0 {
        return Err(f.shape_err(
            "w13_weight",
            "[E, 2I, packed(H)] (3-D, even row count)".into(),
            f.shape("w13_weight")?,
        ));
    }
    let (e, i2, h) = (w13.shape[0], w13.shape[1], w13.shape[2]);
    let i = i2 / 2;
    if w2.shape != [e, h, i] {
        return Err(f.shape_err(
            "w2_weight",
            format!(
                "logical [E = {e}, H = {h}, I = {i}] (packed [{e}, {h}, {}])",
                scheme.weight.packed_len(i)
            ),
            w2.shape.clone(),
        ));
    }
    let expert_map = if f.has("expert_map") {
        let (m, s) = f.ints("expert_map")?;
        if s.len() != 1 {
            return Err(f.shape_err("expert_map", "[n_experts]".into(), s));
        }
        Some(
            m.into_iter()
                .map(|v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
                .collect::<Vec<i32>>(),
        )
    } else {
        None
    };
    let n_experts = match (&expert_map, f.meta_parse::<usize>("n_experts")?) {
        (Some(m), _) => m.len(),
        (None, Some(n)) => n,
        (None, None) => e,
    };
    let activation = f
        .meta_parse::<Activation>("activation")?
        .unwrap_or_default();
    let router = router_from_meta(f, RouterConfig::default())?;
    let act_scale_mode = f.meta_parse::<ScaleMode>("scale_mode")?.unwrap_or_default();
    let layer = MoeLayer {
        config: MoeConfig {
            scheme,
            activation,
            router,
            act_scale_mode,
            n_experts,
            hidden: h,
            inter: i,
            local_experts: w13.shape[0],
        },
        weights: MoeWeights {
            w13,
            w2,
            w13_bias: opt_floats(f, "w13_bias", &[e, 2 * i])?,
            w2_bias: opt_floats(f, "w2_bias", &[e, h])?,
            e_score_correction_bias: opt_floats(f, "e_score_correction_bias", &[n_experts])?,
            expert_map,
        },
    };
    let w13_orig = opt_floats(f, "w13_weight_orig", &[e, 2 * i, h])?;
    let w2_orig = opt_floats(f, "w2_weight_orig", &[e, h, i])?;
    finish(f, layer, w13_orig, w2_orig)
}

/// gpt-oss: `*_blocks` `[E, N, K/32, 16]` (FP4, low nibble first), `*_scales` `[E, N, K/32]`,
/// `*_bias` `[E, N]`; gate/up rows interleaved -> `swigluoai`, top-k-then-softmax, top-4,
/// weight-only MXFP4 (NUMERICS.md 9.3 and 11).
fn load_gptoss(f: &StFile, prefix: &str, hf: bool) -> Result<LoadedLayer, IoError> {
    let (b1, s1, bias1, b2, s2, bias2) = if hf {
        (
            format!("{prefix}gate_up_proj_blocks"),
            format!("{prefix}gate_up_proj_scales"),
            format!("{prefix}gate_up_proj_bias"),
            format!("{prefix}down_proj_blocks"),
            format!("{prefix}down_proj_scales"),
            format!("{prefix}down_proj_bias"),
        )
    } else {
        (
            format!("{prefix}mlp1_weight.blocks"),
            format!("{prefix}mlp1_weight.scales"),
            format!("{prefix}mlp1_bias"),
            format!("{prefix}mlp2_weight.blocks"),
            format!("{prefix}mlp2_weight.scales"),
            format!("{prefix}mlp2_bias"),
        )
    };
    let load = |bn: &str, sn: &str| -> Result<MxTensor, IoError> {
        let (data, bs) = f.bytes_u8(bn)?;
        if bs.len() != 4 || bs[3] != 16 {
            return Err(f.shape_err(bn, "[E, N, K/32, 16]".into(), bs));
        }
        let (scales, ss) = f.bytes_u8(sn)?;
        if ss != bs[..3] {
            return Err(f.shape_err(sn, format!("{:?} (blocks.shape[:-1])", &bs[..3]), ss));
        }
        MxTensor::new(
            MxFormat::Fp4E2M1,
            vec![bs[0], bs[1], bs[2] * BLOCK],
            data,
            scales,
        )
        .map_err(|e: FormatError| IoError::Invalid {
            path: f.path.clone(),
            msg: format!("{bn}: {e}"),
        })
    };
    let w13 = load(&b1, &s1)?;
    let w2 = load(&b2, &s2)?;
    let (e, i2, h) = (w13.shape[0], w13.shape[1], w13.shape[2]);
    let i = i2 / 2;
    if i2 % 2 != 0 || w2.shape != [e, h, i] {
        return Err(f.shape_err(
            &b2,
            format!("[E = {e}, H = {h}, I/32 = {}, 16]", i / BLOCK),
            f.shape(&b2)?,
        ));
    }
    let defaults = RouterConfig {
        scoring: Scoring::TopkSoftmax,
        top_k: 4.min(e),
        renormalize: false,
        ..RouterConfig::default()
    };
    let layer = MoeLayer {
        config: MoeConfig {
            scheme: Scheme::new(MxFormat::Fp4E2M1, None),
            activation: Activation::SwigluOai,
            router: router_from_meta(f, defaults)?,
            act_scale_mode: ScaleMode::Even,
            n_experts: e,
            hidden: h,
            inter: i,
            local_experts: w13.shape[0],
        },
        weights: MoeWeights {
            w13,
            w2,
            w13_bias: opt_floats(f, &bias1, &[e, 2 * i])?,
            w2_bias: opt_floats(f, &bias2, &[e, h])?,
            e_score_correction_bias: None,
            expert_map: None,
        },
    };
    finish(f, layer, None, None)
}
