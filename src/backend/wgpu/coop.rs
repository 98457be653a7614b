//! The cooperative-matrix prefill GEMM (shaders/moe_gemm_coop.wgsl, moe_coop_prepass.wgsl):
//! its kernels ([`CoopKernel`]: k32, k64, k64p, k64pw) and their workgroup memory, the entry
//! points built without naga's runtime checks ([`COOP_TRUSTED_ENTRIES`]), the start-up device
//! checks that decide whether and which kernel runs (`coop_check`, `coop64_check`,
//! `coop64p_check`, each against a product computed here by hand) and the switches tests and
//! bench use (`set_coop_gemm`, `set_coop_k64`, `set_coop_pre`).
//!
//! An `impl Context` block over the context's `coop_*` fields (context.rs); the checks build
//! their pipelines through its pipeline cache (context.rs) and read results back through
//! readback.rs; the subgroup layout check is gemv_config.rs's.

use super::context::Context;
use super::gemv_config::GemvConfig;
use super::source::Shader;
use crate::backend::BackendError;
use std::sync::atomic::Ordering;

/// Workgroup memory of the cooperative kernel k64 (shaders/moe_gemm_coop.wgsl): activation hi
/// and lo tiles 2 x 64 x 72 f16, weight tile 64 x 136 f16, hand-out staging 32 x 68 f32, the
/// code table 256 f32, block_amax 128 u32, the tile descriptor and the two exponent slot pairs.
pub const COOP64_WORKGROUP_BYTES: u32 =
    2 * 64 * 72 * 2 + 64 * 136 * 2 + 32 * 68 * 4 + 1024 + 512 + 16 + 16;
/// Workgroup memory of kernel k64p: k64's without the activation tiles (its A fragments come
/// from the pre-converted storage buffers).
pub const COOP64P_WORKGROUP_BYTES: u32 = COOP64_WORKGROUP_BYTES - 2 * 64 * 72 * 2;

/// The entry points of shaders/moe_gemm_coop.wgsl built without naga's index clamps and loop
/// bounding by default (kernels k64, k64p and k64pw: [`coop_runtime_checks`]; on the H200 this
/// takes 9 % off a 2048-token prefill, docs/h200-2026-12-01s9-wgpucoop). tests/shaders.rs
/// (`coop_trusted_entries_are_in_bounds`) proves, for every override combination the backend
/// uses, that each index into a workgroup, private or function array or vector these entry
/// points reach (cooperative loads and stores over their whole 16x16 extent included) is in
/// range and that each of their loops ends. Storage buffers keep the driver's robust buffer
/// access on Vulkan either way. `MXMOE_WGPU_COOP_CHECKED=1` builds them checked.
pub const COOP_TRUSTED_ENTRIES: [&str; 6] = [
    "coop64_gemm1",
    "coop64_gemm2",
    "coop64p_gemm1",
    "coop64p_gemm2",
    "coop64pw_gemm1",
    "coop64pw_gemm2",
];

/// The runtime checks of [`COOP_TRUSTED_ENTRIES`]' module: no bounds checks (naga's clamps
/// of workgroup / private indices; on Vulkan storage buffers keep the device's robust buffer
/// access, which wgpu enables where offered) and no loop bounding, both justified by
/// tests/shaders.rs; integer-division guards stay (the divisors are constants but for the
/// host's `top_k` and `chunk_experts`, which a static check cannot see; the guards of
/// constant divisors fold away).
pub fn coop_runtime_checks() -> wgpu::ShaderRuntimeChecks {
    let mut c = wgpu::ShaderRuntimeChecks::checked();
    c.bounds_checks = false;
    c.force_loop_bounding = false;
    c
}

/// The cooperative GEMM's kernels (`MXMOE_COOP_KERNEL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopKernel {
    /// `coop_gemm1/2`: the first kernel (K steps of 32).
    K32,
    /// `coop64_gemm1/2`: K steps of 64, conflict-free staging (where its check passed; the
    /// default where k64pw's check failed).
    K64,
    /// `coop64p_gemm1/2` after the pre-passes `coopp_prep1/2` (moe_coop_prepass.wgsl): k64 with
    /// the activations converted to f16 once per forward (one exponent per row) and loaded by
    /// the MMAs straight from storage. Not the default (slower than k64pw on the H200).
    K64p,
    /// `coop64pw_gemm1/2` after the same pre-passes: k64p's activations copied (16-byte loads,
    /// no conversion, no atomics) into k64's workgroup tiles each K step, for drivers whose
    /// cooperative loads from storage are slow. The default where k64's and k64p's checks
    /// passed (13 % faster than k64 at gpt-oss-120b 2048 tokens on the H200).
    K64pw,
}

impl CoopKernel {
    /// The names `MXMOE_COOP_KERNEL` takes (and `auto`).
    pub const NAMES: [(&'static str, CoopKernel); 4] = [
        ("k32", CoopKernel::K32),
        ("k64", CoopKernel::K64),
        ("k64p", CoopKernel::K64p),
        ("k64pw", CoopKernel::K64pw),
    ];

    /// The name (`MXMOE_COOP_KERNEL`, notes).
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }

    /// Parse `MXMOE_COOP_KERNEL`'s value: Ok(None) for `auto` (or empty), Err naming the
    /// variable, the value and the accepted names.
    pub fn parse(v: &str) -> Result<Option<CoopKernel>, String> {
        let v = v.trim();
        if v.is_empty() || v == "auto" {
            return Ok(None);
        }
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == v)
            .map(|(_, k)| Some(*k))
            .ok_or_else(|| format!("MXMOE_COOP_KERNEL={v}: expected k32, k64, k64p, k64pw or auto"))
    }

    /// The entry points (gemm1, gemm2).
    pub fn entries(self) -> (&'static str, &'static str) {
        match self {
            CoopKernel::K32 => ("coop_gemm1", "coop_gemm2"),
            CoopKernel::K64 => ("coop64_gemm1", "coop64_gemm2"),
            CoopKernel::K64p => ("coop64p_gemm1", "coop64p_gemm2"),
            CoopKernel::K64pw => ("coop64pw_gemm1", "coop64pw_gemm2"),
        }
    }

    /// Whether the kernel reads activations pre-converted by `coopp_prep1/2`.
    pub fn prepass(self) -> bool {
        matches!(self, CoopKernel::K64p | CoopKernel::K64pw)
    }
}

/// `coop_check` / `coop64_check` output: C x 2 of A[i][k] = (3i + k) % 7 - 3 and
/// B[k][n] = (5k + n) % 11 - 5 (16 x 32 by 32 x 16, small integers: exact), row-major.
fn check_coop_product(got: &[f32]) -> Result<(), String> {
    for i in 0..16i64 {
        for n in 0..16i64 {
            let want: i64 = (0..32i64)
                .map(|k| ((3 * i + k) % 7 - 3) * ((5 * k + n) % 11 - 5))
                .sum::<i64>()
                * 2;
            let g = got[(i * 16 + n) as usize];
            if g != want as f32 {
                return Err(format!("C[{i}][{n}] = {g}, expected {want}"));
            }
        }
    }
    Ok(())
}

impl Context {
    /// Whether the prefill GEMM runs on cooperative matrices now.
    pub fn coop_gemm(&self) -> bool {
        self.coop_gemm.load(Ordering::Relaxed)
    }

    /// The pipeline overrides the cooperative GEMM's entry points take beyond the GEMM's own
    /// (those of the kernel that runs now).
    pub fn coop_overrides(&self) -> Vec<(&'static str, u32)> {
        if self.coop_k64() || self.coop_pre().is_some() {
            self.coop64_overrides().to_vec()
        } else {
            self.coop_overrides.to_vec()
        }
    }

    /// Kernel k64's overrides: the diagnostic mask and where FP4 is decoded.
    fn coop64_overrides(&self) -> [(&'static str, u32); 2] {
        [
            self.coop_overrides[1],
            (
                "COOP_FP4_REGISTERS",
                self.fp4_register_decode.load(Ordering::Relaxed) as u32,
            ),
        ]
    }

    /// Whether the cooperative GEMM (when it runs) is kernel k64 (else k32).
    pub fn coop_k64(&self) -> bool {
        self.coop_k64.load(Ordering::Relaxed)
    }

    /// The cooperative GEMM's entry points now: (gemm1, gemm2).
    pub fn coop_entries(&self) -> (&'static str, &'static str) {
        self.coop_kernel().entries()
    }

    /// The cooperative GEMM's kernel now (when it runs).
    pub fn coop_kernel(&self) -> CoopKernel {
        if let Some(k) = self.coop_pre() {
            k
        } else if self.coop_k64() {
            CoopKernel::K64
        } else {
            CoopKernel::K32
        }
    }

    /// The pre-pass kernel (k64p or k64pw) when the cooperative GEMM runs one.
    pub fn coop_pre(&self) -> Option<CoopKernel> {
        *self.coop_pre.lock().unwrap()
    }

    /// Use a pre-pass kernel (`Some(K64p | K64pw)`; its device check and pipelines run first:
    /// Err where they or k64's check failed, or for a kernel without pre-passes) or none
    /// (`None`: k64 or k32 as chosen before).
    pub fn set_coop_pre(&self, k: Option<CoopKernel>) -> Result<(), String> {
        if let Some(k) = k {
            if !k.prepass() {
                return Err(format!("kernel {} has no pre-passes", k.name()));
            }
            if !self.coop_k64_ok {
                let why = self.coop_k64_note.lock().unwrap().clone();
                return Err(format!(
                    "kernel {} needs kernel k64's layouts: {}",
                    k.name(),
                    if why.is_empty() {
                        self.gemm_note()
                    } else {
                        why
                    }
                ));
            }
            // Checked on every switch (its pipelines are cached after the first).
            self.check_coop64p(k)?;
        }
        *self.coop_pre.lock().unwrap() = k;
        Ok(())
    }

    /// Use kernel k64 (`true`, only where it passed its checks) or k32 for the cooperative
    /// GEMM. Err when k64 is asked on a device that cannot run it.
    pub fn set_coop_k64(&self, on: bool) -> Result<(), String> {
        if on && !self.coop_k64_ok {
            let why = self.coop_k64_note.lock().unwrap().clone();
            return Err(if why.is_empty() {
                self.gemm_note()
            } else {
                why
            });
        }
        self.coop_k64.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Which GEMM the device chose at start-up and why, in words.
    pub fn gemm_note(&self) -> String {
        self.coop_note.lock().unwrap().clone()
    }

    /// Use the cooperative-matrix GEMM (`true`, only where it passed its checks) or the tiled
    /// one. Err when `true` is asked on a device that cannot run it.
    pub fn set_coop_gemm(&self, on: bool) -> Result<(), String> {
        if on && !self.coop_ok {
            return Err(self.gemm_note());
        }
        self.coop_gemm.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Multiply the known 16x32 by 32x16 product of `coop_check` (shaders/moe_gemm_coop.wgsl)
    /// on the device and compare every element exactly; then build the two GEMM pipelines
    /// (default overrides) so a driver that rejects them (workgroup memory, compilation) is
    /// found here, not in a forward.
    fn check_coop(&self) -> Result<(), String> {
        let pipe = self
            .pipeline(Shader::MoeGemmCoop, "coop_check", &self.coop_overrides[..1])
            .map_err(|e| e.to_string())?;
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&self.run_check(&pipe, 1024).map_err(|e| e.to_string())?);
        check_coop_product(&got)?;
        for entry in ["coop_gemm1", "coop_gemm2"] {
            self.pipeline(Shader::MoeGemmCoop, entry, &self.coop_overrides)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Kernel k64's device check: `coop64_check` (its layouts: column-major A, row-major B, the
    /// hand-out stride) must give exactly the product `coop_check` gives, and both k64
    /// pipelines must build (46 KiB of workgroup memory: an adapter with less refuses here).
    fn check_coop64(&self) -> Result<(), String> {
        let need = COOP64_WORKGROUP_BYTES;
        let have = self.limits.max_compute_workgroup_storage_size;
        if need > have {
            return Err(format!(
                "kernel k64 needs {need} B of workgroup memory, the adapter has {have} B"
            ));
        }
        let pipe = self
            .pipeline(Shader::MoeGemmCoop, "coop64_check", &[])
            .map_err(|e| e.to_string())?;
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&self.run_check(&pipe, 1024).map_err(|e| e.to_string())?);
        check_coop_product(&got)?;
        let ov = self.coop64_overrides();
        for entry in ["coop64_gemm1", "coop64_gemm2"] {
            self.pipeline(Shader::MoeGemmCoop, entry, &ov)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Kernel k64p's device check: `coop64p_check` loads A with coopLoadT from a storage buffer
    /// (f16 rows of stride 40 at a row offset, as the k-loop loads xp_hi) and must give exactly
    /// the product `coop_check` gives; then the GEMM pipelines of kernel `k` (k64p or k64pw;
    /// only the one asked for: each costs seconds of driver compilation at start-up) and the
    /// pre-passes must build.
    fn check_coop64p(&self, k: CoopKernel) -> Result<(), String> {
        // k64pw keeps k64's workgroup tiles (A is copied into them); k64p drops the A tiles.
        let need = if k == CoopKernel::K64pw {
            COOP64_WORKGROUP_BYTES
        } else {
            COOP64P_WORKGROUP_BYTES
        };
        let have = self.limits.max_compute_workgroup_storage_size;
        if need > have {
            return Err(format!(
                "kernel {} needs {need} B of workgroup memory, the adapter has {have} B",
                k.name()
            ));
        }
        let run = || -> Result<Vec<u8>, BackendError> {
            let pipe = self.pipeline(Shader::MoeGemmCoop, "coop64p_check", &[])?;
            // A[i][k] = (3i + k) % 7 - 3 at row i + 1 of a [17][40] f16 buffer.
            let mut a = vec![half::f16::ZERO; 17 * 40];
            for i in 0..16usize {
                for k in 0..32usize {
                    a[(i + 1) * 40 + k] = half::f16::from_f32(((3 * i + k) % 7) as f32 - 3.0);
                }
            }
            let xa = self.upload_owned("coop64p_check_a", bytemuck::cast_slice(&a));
            let out = self.storage(1024);
            let bg = self.bind(&pipe, &[(9, &out), (17, &xa)]);
            let mut enc = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("coop64p_check"),
                });
            {
                let mut p = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                p.set_pipeline(&pipe);
                p.set_bind_group(0, &bg, &[]);
                p.dispatch_workgroups(1, 1, 1);
            }
            let mut r = self.submit_and_read(enc, &[(&out, 1024)])?;
            self.give([out]);
            Ok(r.swap_remove(0))
        };
        let got: Vec<f32> =
            bytemuck::pod_collect_to_vec(&run().map_err(|e| format!("coop64p_check failed: {e}"))?);
        check_coop_product(&got).map_err(|e| format!("coop64p_check failed: {e}"))?;
        let ov = self.coop64_overrides();
        let (g1, g2) = k.entries();
        for entry in [g1, g2] {
            self.pipeline(Shader::MoeGemmCoop, entry, &ov)
                .map_err(|e| e.to_string())?;
        }
        for entry in ["coopp_prep1", "coopp_prep2"] {
            self.pipeline(Shader::MoeCoopPrepass, entry, &[])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The cooperative GEMM's start-up choice, the end of [`Context::new`]: where nothing ruled
    /// it out before the device was created (`coop_why` is None), the subgroup layout and
    /// `coop_check` decide whether it runs, then k64's and the pre-pass kernels' checks which
    /// kernel (`MXMOE_COOP_KERNEL`: `kernel_env`); writes the note [`Context::gemm_note`]
    /// returns. Err where `MXMOE_GEMM=coop` (`gemm_env`) or a kernel asked for by name cannot
    /// run.
    pub(super) fn init_coop(
        &mut self,
        mut coop_why: Option<String>,
        kernel_env: Option<CoopKernel>,
        gemm_env: Option<&str>,
    ) -> Result<(), BackendError> {
        if coop_why.is_none() {
            let layout = GemvConfig {
                subgroup: true,
                lanes: 32,
                split: 1,
                prefetch: false,
                words: false,
                one_row: false,
            };
            coop_why = if self.subgroup_size != Some(32) || !self.check_subgroup_layout(layout) {
                Some(format!(
                    "subgroups are not 32 consecutive invocations (subgroup size {:?})",
                    self.subgroup_size
                ))
            } else {
                self.check_coop()
                    .err()
                    .map(|e| format!("coop_check failed: {e}"))
            };
        }
        self.coop_ok = coop_why.is_none();
        self.coop_gemm.store(self.coop_ok, Ordering::Relaxed);
        if self.coop_ok {
            let k64 = self.check_coop64();
            self.coop_k64_ok = k64.is_ok();
            if let Err(e) = &k64 {
                if matches!(
                    kernel_env,
                    Some(CoopKernel::K64 | CoopKernel::K64p | CoopKernel::K64pw)
                ) {
                    return Err(BackendError::Device(format!(
                        "MXMOE_COOP_KERNEL={} on {}: coop64_check failed: {e}",
                        kernel_env.map_or("", |k| k.name()),
                        self.info.adapter.name
                    )));
                }
                *self.coop_k64_note.lock().unwrap() = format!("coop64_check failed: {e}");
            }
            self.coop_k64.store(
                self.coop_k64_ok && kernel_env != Some(CoopKernel::K32),
                Ordering::Relaxed,
            );
            // Kernel k64pw is the default where k64 passed (gpt-oss-120b at 2048 tokens on the
            // H200: 18.4 vs 21.2 ms GPU, docs/h200-2026-12-01s5-closing/extra/prepass; the
            // forced-GEMM catalog: docs/h200-2026-12-01s6-wgpu). Asked for by name, a failed
            // check is an error; by default, k64 stays and the note says why.
            let pre = match kernel_env {
                None => Some(CoopKernel::K64pw),
                Some(k) if k.prepass() => Some(k),
                Some(_) => None,
            };
            if let Some(k) = pre.filter(|_| self.coop_k64_ok) {
                if let Err(e) = self.set_coop_pre(Some(k)) {
                    if kernel_env.is_some() {
                        return Err(BackendError::Device(format!(
                            "MXMOE_COOP_KERNEL={} on {}: {e}",
                            k.name(),
                            self.info.adapter.name
                        )));
                    }
                    *self.coop_pre_note.lock().unwrap() = format!("k64pw not used: {e}; ");
                }
            }
        }
        *self.coop_note.lock().unwrap() = match coop_why {
            None => format!(
                "cooperative matrices (moe_gemm_coop.wgsl: f16 16x16x16, f32 accumulation, {}{}; \
                 MXMOE_GEMM=tiled for the tiled GEMM)",
                if let Some(k) = self.coop_pre() {
                    format!(
                        "kernel {} (k64 with the activations pre-converted once per forward \
                         by coopp_prep1/2, one exponent per row, A {}; FP4 decoded {}; \
                         coop64p_check passed; MXMOE_COOP_KERNEL=k64 for k64, k32 for the \
                         first kernel)",
                        k.name(),
                        if k == CoopKernel::K64p {
                            "loaded by the MMAs from storage"
                        } else {
                            "copied into workgroup memory"
                        },
                        if self.fp4_register_decode.load(Ordering::Relaxed) {
                            "in registers"
                        } else {
                            "through the code table"
                        }
                    )
                } else if self.coop_k64() {
                    format!(
                        "kernel k64 (K steps of 64, FP4 decoded {}; coop64_check passed; \
                         {}MXMOE_COOP_KERNEL=k32 for the first kernel)",
                        self.coop_pre_note.lock().unwrap(),
                        if self.fp4_register_decode.load(Ordering::Relaxed) {
                            "in registers"
                        } else {
                            "through the code table"
                        }
                    )
                } else {
                    format!(
                        "kernel k32 (K steps of 32, B {}; coop_check passed; k64 not used: {})",
                        if self.coop_overrides[0].1 == 1 {
                            "row-major"
                        } else {
                            "column-major"
                        },
                        if self.coop_k64_ok {
                            "MXMOE_COOP_KERNEL=k32".to_string()
                        } else {
                            self.coop_k64_note.lock().unwrap().clone()
                        }
                    )
                },
                match self.coop_overrides[1].1 {
                    0 => String::new(),
                    d => format!(", DIAGNOSTIC COOP_DIAG={d}: results are wrong"),
                }
            ),
            Some(why) => format!("tiled f32 (moe_gemm.wgsl): {why}"),
        };
        if gemm_env == Some("coop") && !self.coop_ok {
            return Err(BackendError::Device(format!(
                "MXMOE_GEMM=coop on {}: {}",
                self.info.adapter.name,
                self.coop_note.lock().unwrap()
            )));
        }
        Ok(())
    }
}
