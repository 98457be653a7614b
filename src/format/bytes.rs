//! [`Bytes`]: the byte buffer of an [`super::MxTensor`], either owned (a `Vec<u8>`) or a range of
//! a memory-mapped file shared by every tensor of that file (zero-copy loading: a layer's packed
//! weights and scales are read straight from the page cache, never copied; `io::StFile`).
//!
//! Reading is through `Deref<Target = [u8]>`. Writing (`DerefMut`, [`Bytes::to_mut`]) first
//! turns a mapped buffer into an owned copy, so a mapped file is never written.

use memmap2::Mmap;
use std::fmt;
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;

/// Bytes owned or borrowed from a shared read-only file mapping.
#[derive(Clone)]
pub struct Bytes(Repr);

#[derive(Clone)]
enum Repr {
    /// Shared so that cloning a tensor (a layer bundle writer borrowing it) does not copy.
    Owned(Arc<Vec<u8>>),
    Mapped {
        map: Arc<Mmap>,
        range: Range<usize>,
    },
}

impl Bytes {
    /// `range` of a mapping, or `None` when the range lies outside it.
    pub fn mapped(map: Arc<Mmap>, range: Range<usize>) -> Option<Bytes> {
        (range.start <= range.end && range.end <= map.len())
            .then_some(Bytes(Repr::Mapped { map, range }))
    }

    /// Whether the bytes are borrowed from a file mapping (not copied).
    pub fn is_mapped(&self) -> bool {
        matches!(self.0, Repr::Mapped { .. })
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(v) => v.as_slice(),
            Repr::Mapped { map, range } => &map[range.clone()],
        }
    }

    /// The bytes as an owned vector to modify (copies a mapped or shared buffer once).
    pub fn to_mut(&mut self) -> &mut Vec<u8> {
        if let Repr::Mapped { map, range } = &self.0 {
            self.0 = Repr::Owned(Arc::new(map[range.clone()].to_vec()));
        }
        match &mut self.0 {
            Repr::Owned(v) => Arc::make_mut(v),
            Repr::Mapped { .. } => unreachable!("made owned above"),
        }
    }

    /// The bytes as an owned vector (copies a mapped or shared buffer).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Owned(v) => Arc::try_unwrap(v).unwrap_or_else(|v| v.as_ref().clone()),
            Repr::Mapped { map, range } => map[range].to_vec(),
        }
    }
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes(Repr::Owned(Arc::new(Vec::new())))
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Self {
        Bytes(Repr::Owned(Arc::new(v)))
    }
}

impl From<&[u8]> for Bytes {
    fn from(v: &[u8]) -> Self {
        Bytes(Repr::Owned(Arc::new(v.to_vec())))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.to_mut()
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl PartialEq for Bytes {
    fn eq(&self, o: &Bytes) -> bool {
        self.as_slice() == o.as_slice()
    }
}
impl Eq for Bytes {}

impl PartialEq<Vec<u8>> for Bytes {
    fn eq(&self, o: &Vec<u8>) -> bool {
        self.as_slice() == o.as_slice()
    }
}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, o: &[u8]) -> bool {
        self.as_slice() == o
    }
}

impl PartialEq<Bytes> for Vec<u8> {
    fn eq(&self, o: &Bytes) -> bool {
        self.as_slice() == o.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn mapped_reads_the_file_and_writes_copy() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[1, 2, 3, 4, 5]).unwrap();
        let map = Arc::new(unsafe { Mmap::map(f.as_file()) }.unwrap());
        assert!(Bytes::mapped(map.clone(), 3..6).is_none());
        let mut b = Bytes::mapped(map.clone(), 1..4).unwrap();
        assert!(b.is_mapped());
        assert_eq!(&*b, &[2, 3, 4]);
        assert_eq!(b, vec![2u8, 3, 4]);
        b[0] = 9;
        assert!(!b.is_mapped());
        assert_eq!(&*b, &[9, 3, 4]);
        assert_eq!(&map[..], &[1, 2, 3, 4, 5], "the mapping is never written");
        // Owned clones share until one is written.
        let a = Bytes::from(vec![7u8, 8]);
        let mut c = a.clone();
        assert_eq!(a.as_ptr(), c.as_ptr());
        c[1] = 0;
        assert_eq!((&*a, &*c), (&[7u8, 8][..], &[7u8, 0][..]));
    }
}
