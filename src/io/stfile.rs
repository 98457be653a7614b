//! Reading and writing safetensors files: `StFile` (a file with typed accessors whose errors
//! name file, tensor and expectation), `save` (canonical header, atomic write), `write_atomic`.

use super::output::write_atomic;
use super::{os, IoError};
use crate::format::{MxFormat, MxTensor, BLOCK};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;

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
    let mut seen = std::collections::HashSet::new();
    if let Some(t) = tensors.iter().find(|t| !seen.insert(t.name.as_str())) {
        return Err(IoError::Invalid {
            path: path.display().to_string(),
            msg: format!(
                "tensor '{}' would be written twice (a safetensors file holds one tensor per name)",
                t.name
            ),
        });
    }
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

/// One tensor of a file: dtype, shape and where its bytes lie in the file.
struct Entry {
    dtype: Dtype,
    shape: Vec<usize>,
    range: std::ops::Range<usize>,
}

/// A safetensors file read into memory, with typed accessors that produce clear errors.
/// The header is parsed once at `open` into an index, so accessors cost O(1) in the number of
/// tensors (a file with 100,000 tensors is read in linear time).
pub struct StFile {
    pub path: String,
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
    index: HashMap<String, Entry>,
    /// Tensor names, sorted.
    names: Vec<String>,
}

impl StFile {
    /// Read and check a safetensors file: a regular file (not a FIFO or device), a valid
    /// header without duplicate keys, data offsets inside the file.
    pub fn open(path: &Path) -> Result<StFile, IoError> {
        super::output::check_input(path)?;
        let bytes = std::fs::read(path).map_err(|e| os(path, e))?;
        let p = path.display().to_string();
        super::validate::check_header(&p, &bytes)?;
        let (_, md) = SafeTensors::read_metadata(&bytes).map_err(|e| IoError::Corrupt {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        // Validate the whole header/data layout once, so later accessors cannot fail on it.
        let st = SafeTensors::deserialize(&bytes).map_err(|e| IoError::Corrupt {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        let base = bytes.as_ptr() as usize;
        let mut index = HashMap::new();
        for (name, v) in st.iter() {
            let start = v.data().as_ptr() as usize - base;
            index.insert(
                name.to_string(),
                Entry {
                    dtype: v.dtype(),
                    shape: v.shape().to_vec(),
                    range: start..start + v.data().len(),
                },
            );
        }
        let mut names: Vec<String> = index.keys().cloned().collect();
        names.sort();
        let meta = md.metadata().clone().unwrap_or_default();
        Ok(StFile {
            path: p,
            bytes,
            meta,
            index,
            names,
        })
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// The tensor names, sorted, without a copy.
    pub fn name_list(&self) -> &[String] {
        &self.names
    }

    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
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

    pub(crate) fn view(&self, name: &str) -> Result<TensorView<'_>, IoError> {
        let missing = || IoError::Missing {
            path: self.path.clone(),
            tensor: name.into(),
            hint: format!(" (the file has: {})", names_near(&self.names, name)),
        };
        let e = self.index.get(name).ok_or_else(missing)?;
        TensorView::new(e.dtype, e.shape.clone(), &self.bytes[e.range.clone()]).map_err(|err| {
            IoError::Corrupt {
                path: self.path.clone(),
                msg: format!("tensor '{name}': {err}"),
            }
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

    pub(crate) fn shape_err(&self, tensor: &str, expected: String, got: Vec<usize>) -> IoError {
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

/// Tensor names for a message: all of them when few, else the first 20 and a count.
pub(crate) fn names_hint(names: &[String]) -> String {
    if names.len() <= 20 {
        names.join(", ")
    } else {
        format!(
            "{}, ... ({} tensors in all)",
            names[..20].join(", "),
            names.len()
        )
    }
}

/// Tensor names for a "missing tensor" message: all when few, else the 20 closest to `want`
/// (those sharing its stem first, then the longest common prefix) and the count.
pub(crate) fn names_near(names: &[String], want: &str) -> String {
    if names.len() <= 20 {
        return names.join(", ");
    }
    let stem = want
        .rsplit('.')
        .next()
        .unwrap_or(want)
        .split('_')
        .next()
        .unwrap_or(want);
    let prefix = |n: &str| n.bytes().zip(want.bytes()).take_while(|(a, b)| a == b).count();
    let mut ranked: Vec<&String> = names.iter().collect();
    ranked.sort_by_key(|n| (!n.contains(stem), std::cmp::Reverse(prefix(n))));
    let mut near: Vec<&str> = ranked[..20].iter().map(|s| s.as_str()).collect();
    near.sort();
    format!("{}, ... ({} tensors in all)", near.join(", "), names.len())
}
