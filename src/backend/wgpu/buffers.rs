//! The context's buffers: the pool of device buffers (storage, uniform and mappable ones, in
//! power-of-two size classes, handed back with `give` after an op), the mapped upload buffers
//! ([`Upload`]) a forward writes its inputs into, plain uploads, and output poisoning
//! ([`POISON`]).
//!
//! An `impl Context` block over the context's `pool` and `uploads` fields (context.rs);
//! readback.rs takes its mappable buffers from the same pool and asks the uploads a submission
//! read to map again. Large upload copies use `WRITE_PAR_MIN` of `backend/host_io.rs`.

use super::context::Context;
use crate::backend::host_io::WRITE_PAR_MIN;
use crate::backend::BackendError;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use wgpu::util::DeviceExt;

/// The bit pattern outputs are filled with before a run when poisoning is on (a NaN no kernel
/// writes), so an element a kernel forgot to write fails a bit-exact or tolerance comparison.
pub const POISON: u32 = 0x7FC0_DEAD;

/// [`Context::fill_upload`] splits copies of at least [`WRITE_PAR_MIN`] bytes over threads, in
/// pieces of this many bytes (a multiple of wgpu's 4-byte copy alignment).
const WRITE_PIECE: usize = 1 << 20;

/// Pooled buffers kept per (usage, power-of-two size) class.
const POOL_PER_CLASS: usize = 12;

/// Idle upload buffers ([`Upload`]) the context keeps (a layer's cached forward keeps its own).
const UPLOADS_KEPT: usize = 4;

/// [`Upload`] states.
const UP_UNMAPPED: u8 = 0;
const UP_REQUESTED: u8 = 1;
const UP_MAPPED: u8 = 2;
const UP_FAILED: u8 = 3;

/// A host-visible upload buffer (MAP_WRITE | COPY_SRC) that stays mapped while idle: a forward
/// writes its inputs straight into the mapping, unmaps, records copies into the device buffers
/// at the start of its command buffer, and asks for the mapping again right after the submit
/// (granted once that submission completes, in the same poll that completes the readback).
/// `queue.write_buffer` instead creates, maps and later frees a fresh staging buffer per call
/// and submits an extra command buffer of pending writes (wgpu-core `Queue::write_buffer`,
/// `StagingBuffer::new`); at 2048 tokens those staging buffers are tens of MB of fresh mapped
/// memory per forward.
pub struct Upload {
    pub buf: wgpu::Buffer,
    state: Arc<AtomicU8>,
}

impl Context {
    /// A pooled buffer of at least `size` bytes (storage + copy src/dst).
    pub fn storage(&self, size: u64) -> wgpu::Buffer {
        self.take(
            size,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
        )
    }

    /// A pooled uniform buffer holding `data`.
    pub fn uniform(&self, data: &[u8]) -> wgpu::Buffer {
        let b = self.take(
            data.len() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        self.queue.write_buffer(&b, 0, data);
        b
    }

    pub(super) fn take(&self, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        // Power-of-two classes for reuse, but never above what one binding may hold (a storage
        // buffer is always bound whole).
        let pow2 = size.max(256).next_power_of_two();
        let class = if pow2 <= self.max_binding_hw() {
            pow2
        } else {
            size.next_multiple_of(256)
        };
        let key = (usage.bits(), class);
        if let Some(b) = self
            .pool
            .lock()
            .unwrap()
            .get_mut(&key)
            .and_then(|v| v.pop())
        {
            return b;
        }
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mxmoe pool"),
            size: class,
            usage,
            mapped_at_creation: false,
        })
    }

    /// Return pooled buffers after the op's submission completed.
    pub fn give(&self, bufs: impl IntoIterator<Item = wgpu::Buffer>) {
        let mut pool = self.pool.lock().unwrap();
        for b in bufs {
            let v = pool.entry((b.usage().bits(), b.size())).or_default();
            // A few per size class cover one op's needs; more would only pin memory.
            if v.len() < POOL_PER_CLASS {
                v.push(b);
            }
        }
    }

    /// A pooled storage buffer holding `data` (padded to 4 bytes).
    pub fn upload(&self, data: &[u8]) -> wgpu::Buffer {
        let b = self.storage(data.len() as u64);
        if !data.is_empty() {
            if data.len().is_multiple_of(4) {
                self.queue.write_buffer(&b, 0, data);
            } else {
                let mut v = data.to_vec();
                v.resize(data.len().next_multiple_of(4), 0);
                self.queue.write_buffer(&b, 0, &v);
            }
        }
        b
    }

    /// An idle [`Upload`] buffer of at least `size` bytes (the smallest kept one that fits, else
    /// a new one, mapped at creation).
    pub fn take_upload(&self, size: u64) -> Upload {
        {
            let mut ups = self.uploads.lock().unwrap();
            let best = ups
                .iter()
                .enumerate()
                .filter(|(_, u)| u.buf.size() >= size)
                .min_by_key(|(_, u)| u.buf.size())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return ups.swap_remove(i);
            }
        }
        let pow2 = size.max(256).next_power_of_two();
        let class = if pow2 <= self.limits.max_buffer_size {
            pow2
        } else {
            size.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        };
        Upload {
            buf: self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mxmoe upload"),
                size: class,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            }),
            state: Arc::new(AtomicU8::new(UP_MAPPED)),
        }
    }

    /// Keep an idle [`Upload`] buffer for a later [`Context::take_upload`] (a few are kept; one
    /// whose mapping failed is dropped).
    pub fn give_upload(&self, up: Upload) {
        if up.state.load(Ordering::Acquire) == UP_FAILED {
            return;
        }
        let mut ups = self.uploads.lock().unwrap();
        if ups.len() < UPLOADS_KEPT {
            ups.push(up);
        }
    }

    /// Write `parts` ((byte offset, bytes), offsets and lengths multiples of 4) into `up`'s
    /// mapping, then unmap it so that copies from it can be recorded. Waits for the mapping if
    /// the last submission that read the buffer is still running; parts of [`WRITE_PAR_MIN`]
    /// bytes or more are copied from rayon's threads in [`WRITE_PIECE`] pieces (a 2048-token
    /// batch is tens of MB).
    pub fn fill_upload(&self, up: &Upload, parts: &[(u64, &[u8])]) -> Result<(), BackendError> {
        use rayon::prelude::*;
        let map_err = |e: String| BackendError::Device(format!("upload buffer: {e}"));
        if up.state.load(Ordering::Acquire) == UP_UNMAPPED {
            // Left unmapped by a forward that failed between its fill and its submit.
            self.request_map(up);
        }
        if up.state.load(Ordering::Acquire) == UP_REQUESTED {
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| map_err(format!("poll: {e}")))?;
        }
        if up.state.load(Ordering::Acquire) != UP_MAPPED {
            up.state.store(UP_FAILED, Ordering::Release);
            return Err(map_err("map_async for writing failed".into()));
        }
        {
            let mut v = up
                .buf
                .slice(..)
                .get_mapped_range_mut()
                .map_err(|e| map_err(format!("mapped range: {e}")))?;
            for &(off, data) in parts {
                let mut dst = v.slice(off as usize..off as usize + data.len());
                if data.len() < WRITE_PAR_MIN {
                    dst.copy_from_slice(data);
                } else {
                    // wgpu's write-only view is not Send: the pieces are written through its
                    // pointer. SAFETY: the pointer covers `data.len()` writable bytes (the
                    // view's length, checked by `slice`), the pieces are disjoint, and the view
                    // outlives the parallel loop (it is joined before `v` is dropped).
                    let base = dst.as_raw_element_ptr().as_ptr() as usize;
                    data.par_chunks(WRITE_PIECE)
                        .enumerate()
                        .for_each(|(i, s)| unsafe {
                            std::ptr::copy_nonoverlapping(
                                s.as_ptr(),
                                (base as *mut u8).add(i * WRITE_PIECE),
                                s.len(),
                            )
                        });
                }
            }
        }
        up.buf.unmap();
        up.state.store(UP_UNMAPPED, Ordering::Release);
        Ok(())
    }

    /// Ask for `up`'s mapping again (after the submission that reads it).
    pub(super) fn request_map(&self, up: &Upload) {
        up.state.store(UP_REQUESTED, Ordering::Release);
        let st = up.state.clone();
        up.buf.slice(..).map_async(wgpu::MapMode::Write, move |r| {
            st.store(
                if r.is_ok() { UP_MAPPED } else { UP_FAILED },
                Ordering::Release,
            );
        });
    }

    /// An unpooled storage buffer holding `data` exactly (weights that live with a layer).
    pub fn upload_owned(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        let mut v;
        let bytes = if data.len().is_multiple_of(4) && !data.is_empty() {
            data
        } else {
            v = data.to_vec();
            v.resize(data.len().next_multiple_of(4).max(4), 0);
            &v
        };
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// Fill the first `bytes` of an output buffer with [`POISON`] when poisoning is on.
    pub fn maybe_poison(&self, b: &wgpu::Buffer, bytes: u64) {
        if self.poison.load(Ordering::Relaxed) && bytes > 0 {
            let n = (bytes / 4) as usize;
            let v = vec![POISON; n];
            self.queue.write_buffer(b, 0, bytemuck::cast_slice(&v));
        }
    }
}
