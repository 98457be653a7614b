//! MX tensor files: tensors `T` (packed u8) with `T_scale` (E8M0 u8) companions and the
//! `format` / `scale_mode` metadata (`mxmoe quantize` / `dequantize`).

use super::{save, IoError, OutTensor, StFile};
use crate::format::{MxFormat, MxTensor, ScaleMode, BLOCK};
use std::collections::HashMap;
use std::path::Path;

pub(crate) fn mx_out(name: &str, t: &MxTensor) -> [OutTensor; 2] {
    let lead = &t.shape[..t.shape.len() - 1];
    let mut ps = lead.to_vec();
    ps.push(t.row_bytes());
    let mut ss = lead.to_vec();
    ss.push(t.k() / BLOCK);
    [
        OutTensor::u8_shared(name, ps, &t.data),
        OutTensor::u8_shared(format!("{name}_scale"), ss, &t.scales),
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
    let mut out = Vec::new();
    for n in f.names_ref() {
        // T is quantized when T_scale exists, unless T is itself the scales of another tensor
        // (O(1) lookups: files with 100,000 tensors load in linear time).
        let is_scales = n.strip_suffix("_scale").is_some_and(|t| f.has(t));
        if is_scales || !f.has(&format!("{n}_scale")) {
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
