//! The one way files are written and the checks on the paths a command reads and writes.
//!
//! * [`write_atomic`] / [`write_atomic_with`] (streamed): every writer's bytes go to a temporary file in the target's folder
//!   (`.mxmoe-XXXX.tmp`), synced, then renamed over the target, so a failed run never leaves a
//!   partial file and never touches an existing output.
//! * [`all_or_nothing`]: a command writing several files (`gen`: a layer and a batch) stages
//!   them all and renames them only once every one is written; on an error none is renamed.
//! * [`check_input`]: an input must be a regular file (a FIFO, a device or a directory would
//!   hang or mislead the reader).
//! * [`check_outputs`]: no output may be an input (by path, by symlink or hard link: same file
//!   identity), nor another output.

use super::{os, IoError};
use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};

thread_local! {
    /// Staged files of the innermost [`all_or_nothing`], renamed when it succeeds.
    static STAGED: RefCell<Option<Vec<(tempfile::NamedTempFile, PathBuf)>>> =
        const { RefCell::new(None) };
}

/// Write `bytes` to `path` atomically: a temporary file in the same folder, synced, renamed
/// over `path` (inside [`all_or_nothing`]: renamed when it ends successfully). An existing
/// `path` that is not a regular file (a directory, a FIFO, a device) is refused.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// [`write_atomic`] with `body` writing the contents (buffered, streamed: no copy of the whole
/// file in memory): the bytes go to a temporary file in the same folder, which replaces `path`
/// only once complete and synced, so a failure leaves neither a partial file nor a changed
/// `path`.
pub fn write_atomic_with(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), IoError> {
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            return Err(IoError::Invalid {
                path: path.display().to_string(),
                msg: format!(
                    "the output exists and is {}, not a regular file; refusing to replace it",
                    kind_of(&m)
                ),
            });
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".mxmoe-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(|e| os(path, e))?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
        body(&mut w).map_err(|e| os(path, e))?;
        w.flush().map_err(|e| os(path, e))?;
    }
    tmp.as_file().sync_all().map_err(|e| os(path, e))?;
    // tempfile creates 0600; an output file should get the usual 0644.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    let staged = STAGED.with(|s| match s.borrow_mut().as_mut() {
        Some(list) => {
            list.push((tmp, path.to_path_buf()));
            None
        }
        None => Some(tmp),
    });
    if let Some(tmp) = staged {
        tmp.persist(path).map_err(|e| os(path, e.error))?;
    }
    Ok(())
}

/// Run `f`, staging every [`write_atomic`] it makes; rename them all over their targets only if
/// `f` succeeds (on an error the temporary files are deleted and no target is touched).
pub fn all_or_nothing<T, E: From<IoError>>(f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let outer = STAGED.with(|s| s.borrow_mut().replace(Vec::new()));
    let r = f();
    let staged = STAGED.with(|s| std::mem::replace(&mut *s.borrow_mut(), outer));
    let staged = staged.unwrap_or_default();
    let v = r?; // on an error `staged` drops here: the temporary files are deleted.
    for (tmp, path) in staged {
        tmp.persist(&path).map_err(|e| os(&path, e.error))?;
    }
    Ok(v)
}

fn kind_of(m: &std::fs::Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    "not a regular file"
}

/// An input must be a regular file: a FIFO would block the reader forever, a device could be
/// endless, a directory is not a file. (`std::fs::metadata` follows symlinks and does not open
/// the file, so it cannot block.)
pub fn check_input(path: &Path) -> Result<std::fs::Metadata, IoError> {
    let m = std::fs::metadata(path).map_err(|e| os(path, e))?;
    if !m.is_file() {
        return Err(IoError::Invalid {
            path: path.display().to_string(),
            msg: format!(
                "expected a regular safetensors file, found {}",
                kind_of(&m)
            ),
        });
    }
    Ok(m)
}

/// The identity of a file: (device, inode) where the platform has them, else its canonical
/// path; for a path that does not exist yet, its folder's canonical path joined with its name.
#[derive(Debug, PartialEq, Eq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    Path(PathBuf),
}

fn file_id(p: &Path) -> Option<FileId> {
    #[cfg(unix)]
    if let Ok(m) = std::fs::metadata(p) {
        use std::os::unix::fs::MetadataExt;
        return Some(FileId::Inode(m.dev(), m.ino()));
    }
    if let Ok(c) = p.canonicalize() {
        return Some(FileId::Path(c));
    }
    let name = p.file_name()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(FileId::Path(dir.canonicalize().ok()?.join(name)))
}

/// Refuse outputs that are one of the inputs (the same file by path, symlink or hard link) or
/// that repeat another output: `(flag, path)` pairs so the message names them.
pub fn check_outputs(outputs: &[(&str, &Path)], inputs: &[(&str, &Path)]) -> Result<(), IoError> {
    let ids: Vec<_> = inputs.iter().map(|(n, p)| (n, p, file_id(p))).collect();
    for (i, (oflag, o)) in outputs.iter().enumerate() {
        let oid = file_id(o);
        if oid.is_none() {
            continue; // its folder does not exist: the write fails with that reason
        }
        for (iflag, ip, iid) in &ids {
            if *iid == oid {
                return Err(IoError::Invalid {
                    path: o.display().to_string(),
                    msg: format!(
                        "{oflag} is the same file as {iflag} {}; refusing to overwrite an input \
                         (choose another output path)",
                        ip.display()
                    ),
                });
            }
        }
        for (oflag2, o2) in &outputs[..i] {
            if file_id(o2) == oid {
                return Err(IoError::Invalid {
                    path: o.display().to_string(),
                    msg: format!("{oflag} and {oflag2} name the same file"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_or_nothing_renames_only_on_success() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, b"old").unwrap();
        let r: Result<(), IoError> = all_or_nothing(|| {
            write_atomic(&a, b"new")?;
            Err(IoError::Invalid {
                path: "x".into(),
                msg: "fail".into(),
            })
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&a).unwrap(), b"old");
        assert!(!b.exists());
        // Only `a` remains: no temporary file left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        all_or_nothing(|| {
            write_atomic(&a, b"new")?;
            write_atomic(&b, b"bee")
        })
        .unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"new");
        assert_eq!(std::fs::read(&b).unwrap(), b"bee");
    }

    #[test]
    fn outputs_may_not_be_inputs() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.safetensors");
        std::fs::write(&a, b"x").unwrap();
        let other = d.path().join("out.safetensors");
        assert!(check_outputs(&[("--output", &other)], &[("--input", &a)]).is_ok());
        let e = check_outputs(&[("--output", &a)], &[("--input", &a)]).unwrap_err();
        assert!(e.to_string().contains("same file as --input"), "{e}");
        // Via another spelling of the path.
        let dotted = d.path().join(".").join("a.safetensors");
        assert!(check_outputs(&[("--output", &dotted)], &[("--input", &a)]).is_err());
        #[cfg(unix)]
        {
            let link = d.path().join("link.safetensors");
            std::os::unix::fs::symlink(&a, &link).unwrap();
            assert!(check_outputs(&[("--output", &link)], &[("--input", &a)]).is_err());
            let hard = d.path().join("hard.safetensors");
            std::fs::hard_link(&a, &hard).unwrap();
            assert!(check_outputs(&[("--output", &hard)], &[("--input", &a)]).is_err());
        }
        let e = check_outputs(&[("--layer-out", &other), ("--batch-out", &other)], &[]).unwrap_err();
        assert!(e.to_string().contains("same file"), "{e}");
    }
}
