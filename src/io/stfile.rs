//! Reading and writing safetensors files: `StFile` (a file with typed accessors whose errors
//! name file, tensor and expectation), `save` (canonical header, written by
//! `output::write_atomic_with`).

use super::output::write_atomic_with;
use super::{os, IoError};
use crate::format::{Bytes, MxFormat, MxTensor, BLOCK};
use memmap2::Mmap;
use safetensors::tensor::{Dtype, TensorInfo, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Drop the pages of `r` from this process's mapping (unix; no-op elsewhere).
pub(crate) fn release_range(map: &Mmap, r: std::ops::Range<usize>) {
    #[cfg(unix)]
    if !r.is_empty() {
        // SAFETY: `Mmap::map` makes a read-only shared file mapping: DONTNEED only drops the
        // pages from our page tables, and a later access reads the file again (nothing is lost).
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, r.start, r.len())
        };
    }
    #[cfg(not(unix))]
    let _ = (map, r);
}

/// Names for an error message: all of them up to 40, else the first 40 and a count.
pub(crate) fn list_names(names: &[String]) -> String {
    const MAX: usize = 40;
    if names.len() <= MAX {
        return names.join(", ");
    }
    format!(
        "{}, ... ({} more, {} in all)",
        names[..MAX].join(", "),
        names.len() - MAX,
        names.len()
    )
}

/// A tensor to write: name, dtype, shape, little-endian bytes (owned, or borrowed from a mapped
/// input file: `mxmoe extract` writes a layer without copying it into memory).
pub struct OutTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: Bytes,
}

impl OutTensor {
    pub fn f32(name: impl Into<String>, shape: Vec<usize>, v: &[f32]) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::F32,
            shape,
            bytes: bytemuck::cast_slice::<f32, u8>(v).into(),
        }
    }
    pub fn i32(name: impl Into<String>, shape: Vec<usize>, v: &[i32]) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::I32,
            shape,
            bytes: bytemuck::cast_slice::<i32, u8>(v).into(),
        }
    }
    pub fn u8(name: impl Into<String>, shape: Vec<usize>, v: &[u8]) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::U8,
            shape,
            bytes: v.into(),
        }
    }
    /// A u8 tensor sharing `v` (no copy when `v` is mapped).
    pub fn u8_shared(name: impl Into<String>, shape: Vec<usize>, v: &Bytes) -> Self {
        OutTensor {
            name: name.into(),
            dtype: Dtype::U8,
            shape,
            bytes: v.clone(),
        }
    }
}

/// Serialize tensors + metadata and write atomically, streaming the tensor bytes (no copy of
/// the whole file in memory).
///
/// The layout is that of `safetensors::serialize` (tensors ordered by decreasing dtype
/// alignment, then name, so every tensor stays aligned) with the JSON header's keys sorted
/// (the metadata is a `HashMap`, whose order changes from run to run): the same tensors always
/// give the same bytes. The header is space-padded to a multiple of 8 bytes.
pub fn save(
    path: &Path,
    tensors: &[OutTensor],
    meta: HashMap<String, String>,
) -> Result<(), IoError> {
    use std::collections::BTreeMap;
    let invalid = |msg: String| IoError::Invalid {
        path: path.display().to_string(),
        msg,
    };
    // Check each tensor's byte count against its dtype and shape (TensorView::new does).
    for t in tensors {
        TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
            .map_err(|e| invalid(format!("tensor '{}': {e}", t.name)))?;
    }
    let mut order: Vec<&OutTensor> = tensors.iter().collect();
    order.sort_by(|a, b| b.dtype.cmp(&a.dtype).then_with(|| a.name.cmp(&b.name)));
    if let Some(w) = order.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(invalid(format!("tensor '{}' given twice", w[0].name)));
    }
    let mut header: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut off = 0usize;
    for t in &order {
        let end = off + t.bytes.len();
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, end]}),
        );
        off = end;
    }
    if !meta.is_empty() {
        let sorted: BTreeMap<String, String> = meta.into_iter().collect();
        header.insert("__metadata__".into(), serde_json::json!(sorted));
    }
    let mut h = serde_json::to_vec(&header).expect("a JSON value serializes");
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    write_atomic_with(path, |w| {
        w.write_all(&(h.len() as u64).to_le_bytes())?;
        w.write_all(&h)?;
        for t in &order {
            w.write_all(&t.bytes)?;
        }
        Ok(())
    })
}

/// A safetensors file, memory-mapped: opening reads and checks the header only; tensor bytes
/// are read from the mapping when an accessor asks for them (zero-copy for [`StFile::raw`] and
/// [`StFile::mx`]). Typed accessors produce errors naming the file, tensor and expectation.
///
/// As with every memory-mapped reader, the file must not be truncated or rewritten in place
/// while it is open (our own writes replace files by rename, which is safe).
pub struct StFile {
    pub path: String,
    /// The open file, for loaders that copy a tensor ([`StFile::append_to`]).
    file: std::fs::File,
    map: Arc<Mmap>,
    /// Offset of the data section (8 + header length).
    data_start: usize,
    tensors: HashMap<String, TensorInfo>,
    /// Tensor names, sorted.
    names: Vec<String>,
    meta: HashMap<String, String>,
}

impl StFile {
    pub fn open(path: &Path) -> Result<StFile, IoError> {
        let p = path.display().to_string();
        // Stat first: opening a FIFO for reading blocks until a writer appears.
        super::output::check_input(path)?;
        let file = std::fs::File::open(path).map_err(|e| os(path, e))?;
        let md = file.metadata().map_err(|e| os(path, e))?;
        if !md.is_file() {
            return Err(IoError::Invalid {
                path: p,
                msg: "not a regular file".into(),
            });
        }
        // SAFETY: the mapping is read-only and private to this process; the usual caveat of
        // memory-mapped readers (another process truncating the file while it is open) is
        // stated on `StFile`.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| os(path, e))?;
        Self::from_map(p, file, Arc::new(map))
    }

    fn from_map(p: String, file: std::fs::File, map: Arc<Mmap>) -> Result<StFile, IoError> {
        // Duplicate keys first: the crate's parser keeps the last one silently.
        super::validate::check_header(&p, &map)?;
        // read_metadata checks the header and that the offsets tile the data section exactly.
        let (n, md) = SafeTensors::read_metadata(&map).map_err(|e| IoError::Corrupt {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        let tensors: HashMap<String, TensorInfo> = md
            .tensors()
            .into_iter()
            .map(|(k, v)| (k, v.clone()))
            .collect();
        let mut names: Vec<String> = tensors.keys().cloned().collect();
        names.sort();
        let meta = md.metadata().clone().unwrap_or_default();
        Ok(StFile {
            path: p,
            file,
            map,
            data_start: 8 + n,
            tensors,
            names,
            meta,
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Tensor names, sorted (borrowed).
    pub fn names_ref(&self) -> &[String] {
        &self.names
    }

    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> usize {
        self.map.len()
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

    fn info(&self, name: &str) -> Result<&TensorInfo, IoError> {
        self.tensors.get(name).ok_or_else(|| IoError::Missing {
            path: self.path.clone(),
            tensor: name.into(),
            hint: format!(" (the file has: {})", names_near(&self.names, name)),
        })
    }

    fn range(&self, info: &TensorInfo) -> std::ops::Range<usize> {
        self.data_start + info.data_offsets.0..self.data_start + info.data_offsets.1
    }

    pub(crate) fn view(&self, name: &str) -> Result<TensorView<'_>, IoError> {
        let info = self.info(name)?;
        TensorView::new(info.dtype, info.shape.clone(), &self.map[self.range(info)]).map_err(|e| {
            IoError::Corrupt {
                path: self.path.clone(),
                msg: format!("tensor '{name}': {e}"),
            }
        })
    }

    /// A tensor's dtype, shape and bytes, borrowed from the mapping (no copy).
    pub fn raw(&self, name: &str) -> Result<(Dtype, Vec<usize>, Bytes), IoError> {
        let info = self.info(name)?;
        let b = Bytes::mapped(self.map.clone(), self.range(info)).expect("validated offsets");
        Ok((info.dtype, info.shape.clone(), b))
    }

    /// Append a tensor's bytes to `out`, read from the file (not through the mapping): for
    /// loaders that must copy (per-expert stacking), the bytes go straight from the page cache
    /// into `out`, with no mapped pages left in this process.
    pub fn append_to(&self, name: &str, out: &mut Vec<u8>) -> Result<(), IoError> {
        use std::io::{Read, Seek, SeekFrom};
        let info = self.info(name)?;
        let r = self.range(info);
        let want = out.len() + r.len();
        let mut f = &self.file;
        f.seek(SeekFrom::Start(r.start as u64))
            .and_then(|_| f.take(r.len() as u64).read_to_end(out))
            .map_err(|e| IoError::Os {
                path: format!("{} (tensor '{name}')", self.path),
                source: e,
            })?;
        if out.len() != want {
            return Err(IoError::Corrupt {
                path: self.path.clone(),
                msg: format!("tensor '{name}': the file ended early (was it changed while open?)"),
            });
        }
        Ok(())
    }

    /// Drop a tensor's mapped pages from this process's memory once it has been copied (the
    /// loaders that must copy, per-expert and GGUF, call this so the peak stays near one copy).
    /// Touching the tensor again reads it again from the page cache.
    pub fn release(&self, name: &str) {
        #[cfg(unix)]
        if let Some(info) = self.tensors.get(name) {
            let r = self.range(info);
            release_range(&self.map, r);
        }
        #[cfg(not(unix))]
        let _ = name;
    }

    /// A u8 tensor (or one of the 1-byte float dtypes, F8_E8M0 scales for instance, taken as
    /// raw bytes), borrowed from the mapping.
    pub fn bytes_shared(&self, name: &str) -> Result<(Bytes, Vec<usize>), IoError> {
        let (dt, shape, b) = self.raw(name)?;
        if !matches!(
            dt,
            Dtype::U8 | Dtype::I8 | Dtype::F8_E8M0 | Dtype::F8_E4M3 | Dtype::F8_E5M2
        ) {
            return Err(IoError::Dtype {
                path: self.path.clone(),
                tensor: name.into(),
                expected: "U8".into(),
                got: format!("{dt:?}"),
            });
        }
        Ok((b, shape))
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
    /// (u8 E8M0, `[.., K/32]`), borrowed from the mapping.
    pub fn mx(&self, name: &str, format: MxFormat) -> Result<MxTensor, IoError> {
        self.mx_pair(name, &format!("{name}_scale"), format)
    }

    /// An MX tensor from a packed-codes tensor and its E8M0 scales tensor, borrowed from the
    /// mapping. The codes are u8 (`[.., packed(K)]`) or safetensors' own MX element dtypes
    /// (F4, F6_E2M3, F6_E3M2: shape `[.., K]` in elements; F8_E4M3/F8_E5M2: one byte each);
    /// the scales are u8 or F8_E8M0, `[.., K/32]`.
    pub fn mx_pair(&self, name: &str, sname: &str, format: MxFormat) -> Result<MxTensor, IoError> {
        let (dt, pshape, data) = self.raw(name)?;
        let (scales, sshape) = self.bytes_shared(sname)?;
        let Some((&last, lead)) = pshape.split_last() else {
            return Err(self.shape_err(name, "at least one dimension".into(), pshape));
        };
        let elements = matches!(dt, Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2);
        if !elements && !matches!(dt, Dtype::U8 | Dtype::I8 | Dtype::F8_E4M3 | Dtype::F8_E5M2) {
            return Err(IoError::Dtype {
                path: self.path.clone(),
                tensor: name.into(),
                expected: format!("U8 (packed {format} codes) or an MX element dtype"),
                got: format!("{dt:?}"),
            });
        }
        let bb = format.spec().block_bytes();
        let k = if elements {
            if last == 0 || last % BLOCK != 0 {
                return Err(self.shape_err(
                    name,
                    "a last dimension that is a multiple of 32 (elements)".into(),
                    pshape.clone(),
                ));
            }
            last
        } else {
            if last == 0 || last % bb != 0 {
                return Err(self.shape_err(
                    name,
                    format!(
                        "a last dimension that is a multiple of {bb} bytes (one 32-element {format} block)"
                    ),
                    pshape.clone(),
                ));
            }
            last / bb * BLOCK
        };
        let mut want_s = lead.to_vec();
        want_s.push(k / BLOCK);
        if sshape != want_s {
            return Err(self.shape_err(
                sname,
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
