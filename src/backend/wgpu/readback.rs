//! Submission and readback: [`Readback`] (the copies of an op's outputs into one mappable
//! buffer, a large first output in pieces so that the host copies one piece out while the
//! device copies the next), `submit_and_map` / `encode_readback` / `submit_readback` (a
//! forward's submit, spin-then-block wait and copy-out), `submit_wait`, `submit_and_read`
//! (start-up checks and small ops) and `round_trip_probe`.
//!
//! An `impl Context` block (context.rs); the mappable buffers come from the pool of
//! buffers.rs, which also maps again the [`Upload`]s a submission read; the host steps are
//! marked for host_profile.rs. Device errors raised meanwhile come from the context's
//! uncaptured-error slot.

use super::buffers::Upload;
use super::context::Context;
use super::host_profile;
use crate::backend::BackendError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// How long `submit_and_map` polls the fence before it blocks (a forward of a few milliseconds
/// or less finishes while spinning; longer ones block, costing one wake-up).
const SPIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// [`Context::submit_and_map`] reads a first part of at least this many bytes back in pieces
/// of [`READ_PIECE`] bytes (a multiple of 256), each in a submission of its own, so that the
/// host's copy of one piece overlaps the device's copy of the next.
pub const READ_STREAM_MIN: u64 = 16 << 20;
pub const READ_PIECE: u64 = 8 << 20;

/// A readback recorded by [`Context::encode_readback`], submitted by
/// [`Context::submit_readback`]: the finished command buffer (the caller's commands, then the
/// copies into `staging`), the parts' (offset, bytes) in `staging` (the first part's first
/// piece only), and the first part's further pieces (command buffer, mappable buffer, offset in
/// the part, bytes).
pub struct Readback {
    cmd: wgpu::CommandBuffer,
    staging: wgpu::Buffer,
    total: u64,
    parts: Vec<(u64, u64)>,
    #[allow(clippy::type_complexity)]
    more: Vec<(wgpu::CommandBuffer, wgpu::Buffer, u64, u64)>,
}

impl Context {
    /// Record copies of `(buffer, bytes)` into ONE mappable buffer (each part at a 256-byte
    /// aligned offset), submit `enc`, wait for it (spinning on the fence for a short while before
    /// blocking: a blocking wait adds the wake-up latency of a sleeping thread to every forward),
    /// map once and hand the parts to `read`, which copies out what it needs:
    /// [`Context::encode_readback`], then [`Context::submit_readback`] (`pre` on this thread).
    pub fn submit_and_map<T, P: Send>(
        &self,
        enc: wgpu::CommandEncoder,
        uploads: &[&Upload],
        reads: &[(&wgpu::Buffer, u64)],
        pre: impl FnOnce() -> P + Send,
        stream: impl FnMut(&mut P, u64, &[u8]),
        read: impl FnOnce(&[&[u8]], P) -> T,
    ) -> Result<T, BackendError> {
        let rb = self.encode_readback(enc, reads);
        host_profile::mark("finish_encoder");
        self.submit_readback(rb, uploads, pre, false, stream, read)
    }

    /// Record into `enc` the copies of `(buffer, bytes)` into ONE mappable buffer (each part
    /// at a 256-byte aligned offset) and finish it; no submission yet (a forward records this
    /// while other threads write its inputs). The first part is read back in pieces where it is
    /// large: see [`Context::submit_readback`].
    pub fn encode_readback(
        &self,
        mut enc: wgpu::CommandEncoder,
        reads: &[(&wgpu::Buffer, u64)],
    ) -> Readback {
        // The first part's pieces: (offset, bytes); piece 0 shares the first mappable buffer
        // with the other parts.
        let n0 = reads.first().map_or(0, |r| r.1);
        let stream_min = self.read_pieces.0.load(Ordering::Relaxed);
        let piece = self.read_pieces.1.load(Ordering::Relaxed).max(256);
        let pieces: Vec<(u64, u64)> = if n0 >= stream_min {
            (0..n0)
                .step_by(piece as usize)
                .map(|o| (o, piece.min(n0 - o)))
                .collect()
        } else {
            vec![(0, n0)]
        };
        let mut parts = Vec::with_capacity(reads.len());
        let mut total = 0u64;
        for (i, (_, n)) in reads.iter().enumerate() {
            let n = if i == 0 { pieces[0].1 } else { *n };
            parts.push((total, n));
            total = (total + n).next_multiple_of(256);
        }
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = self.take(total.max(4), usage);
        for ((b, _), &(o, n)) in reads.iter().zip(&parts) {
            if n > 0 {
                enc.copy_buffer_to_buffer(b, 0, &staging, o, n);
            }
        }
        let cmd = enc.finish();
        // The other pieces, a command buffer each (submitted one by one).
        let more = pieces[1..]
            .iter()
            .map(|&(o, n)| {
                let st = self.take(n, usage);
                let mut e = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("readback piece"),
                    });
                e.copy_buffer_to_buffer(reads[0].0, o, &st, 0, n);
                (e.finish(), st, o, n)
            })
            .collect();
        Readback {
            cmd,
            staging,
            total: total.max(4),
            parts,
            more,
        }
    }

    /// Submit a recorded readback, wait for it and map it: the parts after the first go to
    /// `read` (the first as an empty slice). The first part goes to `stream` instead (called
    /// with the destination, the byte offset and the bytes): where it is
    /// [`Context::read_pieces`]`.0` bytes or more ([`READ_STREAM_MIN`]), in pieces of
    /// [`READ_PIECE`] bytes, each copied into its own mappable buffer by a submission of its
    /// own, so that the host copies piece i out while the device copies piece i + 1 (a
    /// 2048-token DeepSeek-R1 output is 58.7 MB: the device's copy and the host's copy each
    /// take milliseconds). `pre` runs while the device works, with `overlap` on rayon's threads
    /// (e.g. [`touched_vec`](crate::backend::host_io::touched_vec): the destination's page
    /// faults, which a fresh allocation of tens of MB otherwise takes during the copy-out); its
    /// result is `stream`'s destination, then goes to `read`. The `uploads` the submission reads
    /// are asked to map again right after the submit (see [`Upload`]). Device errors raised
    /// meanwhile are returned as [`BackendError::Device`].
    pub fn submit_readback<T, P: Send>(
        &self,
        rb: Readback,
        uploads: &[&Upload],
        pre: impl FnOnce() -> P + Send,
        overlap: bool,
        mut stream: impl FnMut(&mut P, u64, &[u8]),
        read: impl FnOnce(&[&[u8]], P) -> T,
    ) -> Result<T, BackendError> {
        let Readback {
            cmd,
            staging,
            total,
            parts,
            more,
        } = rb;
        let idx = self.queue.submit([cmd]);
        for up in uploads {
            self.request_map(up);
        }
        let mut more_bufs = Vec::with_capacity(more.len());
        for (c, st, o, n) in more {
            let i = self.queue.submit([c]);
            more_bufs.push((st, o, n, i));
        }
        host_profile::mark("submit");
        let map = |b: &wgpu::Buffer, n: u64| {
            let done = Arc::new(Mutex::new(None));
            let d2 = done.clone();
            b.slice(0..n).map_async(wgpu::MapMode::Read, move |r| {
                *d2.lock().unwrap() = Some(r);
            });
            done
        };
        let done = map(&staging, total);
        let dones: Vec<_> = more_bufs.iter().map(|(b, _, n, _)| map(b, *n)).collect();
        // Whether a map callback came, and with success.
        let status = |d: &Mutex<Option<Result<(), wgpu::BufferAsyncError>>>| match d
            .lock()
            .unwrap()
            .take()
        {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(BackendError::Device(format!("map_async: {e}"))),
            None => Err(BackendError::Device(
                "map_async: no callback after wait".into(),
            )),
        };
        // With `overlap`, the wait on this thread and `pre` on another (rayon::join: `pre` runs
        // here after the wait if no thread took it); else `pre` first, all on this thread (a
        // decode-sized forward would pay two thread wake-ups for nothing).
        let wait = || self.spin_until(|| done.lock().unwrap().is_some(), &idx);
        let (waited, mut dest) = if overlap {
            rayon::join(wait, pre)
        } else {
            let dest = pre();
            (wait(), dest)
        };
        let first = waited.and_then(|()| status(&done));
        host_profile::mark("wait");
        let range = |b: &wgpu::Buffer, n: u64| {
            b.slice(0..n)
                .get_mapped_range()
                .map_err(|e| BackendError::Device(format!("mapped range: {e}")))
        };
        let mut result = first.and_then(|()| {
            let v = range(&staging, total)?;
            stream(&mut dest, 0, &v[..parts[0].1 as usize]);
            Ok(())
        });
        let mut mapped = vec![result.is_ok()];
        for ((b, o, n, i), d) in more_bufs.iter().zip(&dones) {
            result = result.and_then(|()| {
                self.spin_until(|| d.lock().unwrap().is_some(), i)?;
                status(d)?;
                stream(&mut dest, *o, &range(b, *n)?);
                Ok(())
            });
            mapped.push(result.is_ok());
        }
        let out = result.and_then(|()| {
            let v = range(&staging, total)?;
            let views: Vec<&[u8]> = parts
                .iter()
                .enumerate()
                .map(|(i, &(o, n))| {
                    if i == 0 {
                        &v[0..0]
                    } else {
                        &v[o as usize..(o + n) as usize]
                    }
                })
                .collect();
            Ok(read(&views, dest))
        });
        host_profile::mark("copy_out");
        // Mapped buffers go back to the pool; one whose map failed or never came is dropped.
        let bufs = std::iter::once(staging).chain(more_bufs.into_iter().map(|(b, _, _, _)| b));
        for (b, ok) in bufs.zip(mapped) {
            if ok {
                b.unmap();
                self.give([b]);
            }
        }
        host_profile::mark("unmap");
        let out = out?;
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(BackendError::Device(e));
        }
        Ok(out)
    }

    /// Poll the device until `ready()` (set by a callback that a poll runs), spinning for up to
    /// [`SPIN_WAIT`] before one blocking wait for submission `idx` (not for later ones: the
    /// readback's further pieces are copied out as each completes).
    fn spin_until(
        &self,
        ready: impl Fn() -> bool,
        idx: &wgpu::SubmissionIndex,
    ) -> Result<(), BackendError> {
        let t0 = std::time::Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            if t0.elapsed() > SPIN_WAIT {
                self.device
                    .poll(wgpu::PollType::Wait {
                        submission_index: Some(idx.clone()),
                        timeout: None,
                    })
                    .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
                return Ok(());
            }
            self.device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        }
    }

    /// Submit `enc` and wait until the device has run it (the same spin-then-block wait as
    /// [`Context::submit_and_map`]); the `uploads` it reads are asked to map again right after
    /// the submit. For [`crate::backend::Timing::Host`], which ends each phase with a wait.
    pub fn submit_wait(
        &self,
        enc: wgpu::CommandEncoder,
        uploads: &[&Upload],
    ) -> Result<(), BackendError> {
        let idx = self.queue.submit([enc.finish()]);
        for up in uploads {
            self.request_map(up);
        }
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        self.queue
            .on_submitted_work_done(move || d2.store(true, Ordering::Release));
        self.spin_until(|| done.load(Ordering::Acquire), &idx)?;
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(BackendError::Device(e));
        }
        Ok(())
    }

    /// The round trip of a minimal submission, in microseconds ([min, median, max] over `n`):
    /// one 4-byte copy into a mappable buffer, submit, wait and map as a forward does
    /// ([`Context::submit_and_map`]). The floor under any forward's wall time here (host
    /// profile diagnostic).
    pub fn round_trip_probe(&self, n: usize) -> Result<[f64; 3], BackendError> {
        let src = self.storage(4);
        let mut t = Vec::with_capacity(n);
        for _ in 0..n.max(1) {
            let t0 = std::time::Instant::now();
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("probe"),
                });
            enc.clear_buffer(&src, 0, None);
            self.submit_and_map(enc, &[], &[(&src, 4)], || (), |_, _, _| (), |_, _| ())?;
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        self.give([src]);
        t.sort_by(|a, b| a.total_cmp(b));
        Ok([t[0], t[t.len() / 2], t[t.len() - 1]])
    }

    /// Record copies of `(buffer, bytes)` into mappable buffers, submit `enc`, wait, and read
    /// them back. Device errors raised meanwhile are returned as [`BackendError::Device`].
    pub fn submit_and_read(
        &self,
        mut enc: wgpu::CommandEncoder,
        reads: &[(&wgpu::Buffer, u64)],
    ) -> Result<Vec<Vec<u8>>, BackendError> {
        let staging: Vec<wgpu::Buffer> = reads
            .iter()
            .map(|(_, n)| {
                self.take(
                    (*n).max(4),
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                )
            })
            .collect();
        for ((b, n), s) in reads.iter().zip(&staging) {
            if *n > 0 {
                enc.copy_buffer_to_buffer(b, 0, s, 0, *n);
            }
        }
        self.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        for ((_, n), s) in reads.iter().zip(&staging) {
            let tx = tx.clone();
            s.slice(0..(*n).max(4))
                .map_async(wgpu::MapMode::Read, move |r| {
                    let _ = tx.send(r);
                });
        }
        drop(tx);
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| BackendError::Device(format!("poll: {e}")))?;
        for r in rx.iter() {
            r.map_err(|e| BackendError::Device(format!("map_async: {e}")))?;
        }
        let mut out = Vec::with_capacity(reads.len());
        for ((_, n), s) in reads.iter().zip(&staging) {
            {
                let v = s
                    .slice(0..(*n).max(4))
                    .get_mapped_range()
                    .map_err(|e| BackendError::Device(format!("mapped range: {e}")))?;
                out.push(v[..*n as usize].to_vec());
            }
            s.unmap();
        }
        self.give(staging);
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(BackendError::Device(e));
        }
        Ok(out)
    }
}
