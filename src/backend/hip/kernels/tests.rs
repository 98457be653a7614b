//! What the embedded code objects contain: matrix-core instructions in every GEMM kernel
//! (mma.sync in the PTX; MFMA in gfx942, scaled MFMA in gfx950's MX GEMMs, disassembled with
//! llvm-objdump) and no scratch memory in the hot kernels (PTX local depots; the code
//! objects' metadata). The AMD checks need llvm-objdump / llvm-readelf that know gfx950
//! (Debian: llvm-22; scripts/test.sh installs it) and fail without them.
use super::*;
use std::collections::BTreeMap;
use std::process::Command;

#[path = "../../../../tests/host_cxx/mod.rs"]
mod host_cxx;

fn hot(name: &str) -> bool {
    name.starts_with("moe_gemm") || name.starts_with("moe_gemv")
}

/// PTX entry name -> its text.
fn ptx_entries(ptx: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for l in ptx.lines() {
        if let Some(rest) = l.strip_prefix(".visible .entry ") {
            if let Some((n, t)) = cur.take() {
                m.insert(n, t);
            }
            cur = Some((rest.split('(').next().unwrap().to_string(), String::new()));
        }
        if let Some((_, t)) = cur.as_mut() {
            t.push_str(l);
            t.push('\n');
        }
    }
    if let Some((n, t)) = cur {
        m.insert(n, t);
    }
    m
}

/// The GEMM kernels among `names` (NAMES_MMA, NAMES_WGMMA; the rest: their helper kernels).
pub(super) fn gemm_count(names: &[&str]) -> usize {
    names.iter().filter(|n| n.starts_with("moe_gemm")).count()
}

#[test]
fn ptx_gemms_use_mma_sync_and_no_local_memory() {
    for (what, bytes) in [("sm_90", PTX_SM90), ("sm_80", PTX_SM80)] {
        let ptx = std::str::from_utf8(&bytes[..bytes.len() - 1]).unwrap();
        let entries = ptx_entries(ptx);
        for n in NAMES
            .iter()
            .chain(&NAMES_MORE)
            .chain(&NAMES_V2)
            .chain(&NAMES_MMA)
        {
            assert!(entries.contains_key(*n), "{what}: kernel {n} missing");
        }
        let gemms: Vec<_> = entries
            .keys()
            .filter(|n| n.starts_with("moe_gemm"))
            .collect();
        let wg = if what == "sm_90" {
            gemm_count(&NAMES_WGMMA)
        } else {
            0
        };
        assert_eq!(
            gemms.len(),
            12 + NAMES_V2.len() + gemm_count(&NAMES_MMA) + wg,
            "{what}: {gemms:?}"
        );
        for (n, t) in &entries {
            if n.starts_with("moe_gemm") && n.contains("_wg256") {
                // The wgmma GEMM (sm_90a only): weights decoded in registers as the mma
                // GEMM's, B from shared memory through descriptors, published to the async
                // proxy, no mma.sync; the activations staged through registers (wg256) or
                // copied by cp.async (wg256c: 16 bytes, 4 in a last partial K step).
                assert_eq!(what, "sm_90", "{n} in the {what} PTX");
                let staging: &[&str] = if n.contains("_wg256c_") {
                    &[
                        "cp.async.cg.shared.global",
                        "cp.async.ca.shared.global",
                        "cp.async.wait_all",
                    ]
                } else {
                    &["st.shared.v4.u32"]
                };
                for want in [
                    "wgmma.mma_async.sync.aligned.m64n",
                    "wgmma.commit_group.sync.aligned",
                    "wgmma.wait_group.sync.aligned",
                    "fence.proxy.async.shared::cta",
                    "ld.global.nc",
                    "fma.rn.bf16x2",
                ]
                .iter()
                .chain(staging)
                {
                    assert!(t.contains(want), "{what}: {n} has no {want}");
                }
                assert!(!t.contains("mma.sync"), "{what}: {n} has mma.sync");
            } else if n.starts_with("moe_gemm") {
                assert!(
                    t.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                    "{what}: {n} has no bf16 mma.sync"
                );
                if n.contains("_mma_") {
                    // The mma GEMM: weights decoded in registers from 16-byte global
                    // loads, bf16 pairs scaled by fma.rn.bf16x2, B by 16-byte shared loads.
                    for want in ["ld.global.nc", "fma.rn.bf16x2", "ld.shared.v4.u32"] {
                        assert!(t.contains(want), "{what}: {n} has no {want}");
                    }
                } else {
                    assert!(
                        t.contains("ldmatrix.sync.aligned"),
                        "{what}: {n} has no ldmatrix"
                    );
                }
            }
            if hot(n) {
                assert!(
                    !t.contains(".local"),
                    "{what}: {n} uses local memory (a private array)"
                );
            }
        }
    }
}

/// The matrix-core GEMV (hip/gemv_mma.h) is in both PTX targets and only there: bf16
/// mma.sync on registers decoded by bf16x2 fma (no ldmatrix: the fragments never pass
/// through shared memory), 16-byte streaming weight loads, no local memory (the hot-kernel
/// check above); the AMD code objects do not have it.
#[test]
fn ptx_gemv_mma_uses_mma_sync_on_registers() {
    for (what, bytes) in [("sm_90", PTX_SM90), ("sm_80", PTX_SM80)] {
        let ptx = std::str::from_utf8(&bytes[..bytes.len() - 1]).unwrap();
        let entries = ptx_entries(ptx);
        for n in NAMES_GEMV_MMA {
            let t = entries
                .get(n)
                .unwrap_or_else(|| panic!("{what}: kernel {n} missing"));
            for want in [
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                "fma.rn.bf16x2",
                "ld.global.nc",
                "vote.sync.any.pred",
            ] {
                assert!(t.contains(want), "{what}: {n} has no {want}");
            }
            // The activations' f32 -> bf16 conversion: in the loop, except for mmab, whose
            // gemv2 takes bf16 (gemv1 converts its output in its epilogue).
            let converts = !n.starts_with("moe_gemv2_mmab");
            assert_eq!(
                t.contains("cvt.rn.bf16x2.f32"),
                converts,
                "{what}: {n}: cvt.rn.bf16x2.f32"
            );
            assert!(!t.contains("ldmatrix"), "{what}: {n} uses ldmatrix");
            assert!(!t.contains(".local"), "{what}: {n} uses local memory");
        }
        // The split kernels take twice the MMAs of the hi-only ones.
        let mmas = |n: &str| entries[n].matches("mma.sync").count();
        for v in ["mma", "mmaw", "mmab"] {
            for s in ["1", "2"] {
                let (hi, split) = (
                    format!("moe_gemv{s}_{v}_cb4"),
                    format!("moe_gemv{s}_{v}_split_cb4"),
                );
                assert_eq!(mmas(&split), 2 * mmas(&hi), "{what}: {split}");
            }
        }
        assert_eq!(
            mmas("moe_gemv1_mmao_split_cb4"),
            2 * mmas("moe_gemv1_mmao_cb4"),
            "{what}: mmao"
        );
    }
    for (target, bytes) in [("gfx942", GFX942), ("gfx950", GFX950)] {
        let found = bytes
            .windows(b"moe_gemv1_mma".len())
            .any(|w| w == b"moe_gemv1_mma");
        assert!(
            !found,
            "{target}: the NVIDIA-only mma GEMV is in the AMD code object"
        );
    }
}

/// Compiles hip/test/NAME.cpp for the CPU (clang++ with C++20, `flags` added), runs it and
/// returns its standard output after checking that it exited with status 0.
fn run_cpu_emulation(name: &str, flags: &[&str]) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let cxx = host_cxx::host_cxx();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(name);
    let out = Command::new(cxx)
        .args(["-std=c++20", "-O1", "-pthread"])
        .args(flags)
        .arg("-I")
        .arg(root.join("hip"))
        .arg(root.join(format!("hip/test/{name}.cpp")))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cxx}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    println!("{text}");
    assert!(run.status.success(), "{name} failed:\n{text}");
    text
}

/// The matrix-core GEMV's kernels, compiled for the CPU by hip/test/gemv_mma_emu.cpp (one
/// OS thread per GPU thread; mma.sync, bf16x2 fma / cvt and vote emulated from the PTX ISA's
/// definitions), on codes in the nv4 layout (hip/nv4.h nv4_word), give the plain matrix
/// product of the weights decoded from the stored codes with the E2M1 table: both stages,
/// hi-only and hi + lo activations, both activation layouts, scale bytes above 128 (the slow
/// decode path), rows past the matrix, tiles of 1..8 pairs, an empty tile slot, the router
/// weight on the input or the output, with and without biases; each for `mma`, `mmaw` (two
/// tiles per warp, two row groups of K warps), `mmab` (bf16 activations in mx_to_bf16_p8's
/// order, gemv1's output written that way) and, for gemv1, `mmao` and the four-block hi-only
/// `mmab4`, for gemv2 the 32-row `mmab32`. Needs a clang++ with
/// C++20 (the clang the PTX build uses brings one).
#[test]
fn gemv_mma_runs_on_the_cpu_emulation() {
    let text = run_cpu_emulation("gemv_mma_emu", &[]);
    assert_eq!(text.matches(": ok (0 mismatches)").count(), 46, "{text}");
}

/// The warp routing kernels (hip/route_warp.h, `MXMOE_HIP_ROUTE=v6`), compiled for the CPU by
/// hip/test/route_emu.cpp (one OS thread per GPU thread; shuffles, warp reductions and the
/// block barrier emulated), give the ids, weight bits and one-token lists of a port of the
/// CPU router (src/moe/route.rs) with route_token's weight expressions: (top-k) softmax
/// routers of 8 to 1024 experts and top-1 to top-32 in the one-warp and the four-warps
/// kernels, sigmoid routers with and without correction bias, groups of 32 and 64 experts
/// (DeepSeek-V3/R1's 8 groups, top-4 groups, top-8) in the block kernels; random logits
/// and logits drawn from a few values (ties to the lower index, both zeros).
#[test]
fn route_warp_runs_on_the_cpu_emulation() {
    let text = run_cpu_emulation(
        "route_emu",
        &["-ffp-contract=off", "-Wno-ignored-attributes"],
    );
    assert!(text.contains("route_emu: ok (0 mismatches)"), "{text}");
    assert!(text.contains("948 cases, 0 mismatches"), "{text}");
}

/// The AMD-only code of the prefill GEMMs, executed without an AMD GPU: hip/test/amd_gemm_emu.cpp
/// compiles the whole kernel source for the CPU as the gfx942 / gfx950 targets see it
/// (`MX_AMD`, 64-lane wavefronts, `__gfx950__`), each GPU thread a fiber, with the two
/// matrix instructions emulated from AMD's documented lane layouts
/// (`v_mfma_f32_16x16x16_bf16` of the fragment interface, gfx950's
/// `v_mfma_scale_f32_16x16x128_f8f6f4` on packed MX codes and E8M0 scales), and checks both
/// GEMM stages against a double-precision product of codes decoded by its own OCP tables:
/// the bf16 MFMA kernels for every weight format (FP4, both FP6, both FP8, INT8; hi-only and
/// hi + lo activations, the intermediate QDQ, SiLU and SwiGLU-OAI, router weight on the
/// input or the output) and the seven scaled-MFMA kernels (each stage). What it cannot
/// show is that the hardware follows the documents and that clang's gfx code is right.
#[test]
fn amd_gemms_run_on_the_cpu_emulation() {
    let text = run_cpu_emulation("amd_gemm_emu", &["-Wno-ignored-attributes", "-Wno-psabi"]);
    assert!(text.contains("amd_gemm_emu: 32 cases, 0 failed"), "{text}");
    assert_eq!(
        text.matches(": ok (0 mismatches, 0 unwritten").count(),
        32,
        "{text}"
    );
    assert!(!text.contains("FAILED"), "{text}");
}

/// The kernel tables of the CPU stand-ins for the drivers are every kernel the code objects
/// export: hip/test/amd_kernels.inc (hip/test/hip_emu.cpp) `NAMES`, `NAMES_MORE` and gfx950's
/// `NAMES_GFX950`; hip/test/nv_kernels.inc (hip/test/cuda_emu.cpp) the PTX's `NAMES`,
/// `NAMES_MORE`, `NAMES_GEMV_MMA`, `NAMES_V2`, `NAMES_MMA` and `NAMES_WGMMA`; no more, no fewer.
#[test]
fn emu_kernel_tables_match_the_names() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = |file: &str| -> Vec<String> {
        std::fs::read_to_string(root.join(file))
            .unwrap()
            .lines()
            .filter_map(|l| Some(l.strip_prefix("K(")?.strip_suffix(')')?.to_string()))
            .collect()
    };
    let amd: Vec<String> = NAMES
        .iter()
        .chain(NAMES_MORE.iter())
        .chain(NAMES_GFX950.iter())
        .map(|s| s.to_string())
        .collect();
    let nv: Vec<String> = NAMES
        .iter()
        .chain(NAMES_MORE.iter())
        .chain(NAMES_GEMV_MMA.iter())
        .chain(NAMES_V2.iter())
        .chain(NAMES_MMA.iter())
        .chain(NAMES_WGMMA.iter())
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        listed("hip/test/amd_kernels.inc"),
        amd,
        "hip/test/amd_kernels.inc"
    );
    assert_eq!(
        listed("hip/test/nv_kernels.inc"),
        nv,
        "hip/test/nv_kernels.inc"
    );
}

/// build.rs recompiles the kernels when any file they are built from changes: its SOURCES
/// list names every `.cu` and `.h` under hip/ (hip/mxmoe.cu and the op-family headers it
/// includes, and the primitives those rest on), and each header is included somewhere.
#[test]
fn build_rs_lists_every_hip_source() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = std::fs::read_to_string(root.join("build.rs")).unwrap();
    let mut names = Vec::new();
    let mut text = String::new();
    for e in std::fs::read_dir(root.join("hip")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".h") || name.ends_with(".cu") {
            text.push_str(&std::fs::read_to_string(&path).unwrap());
            names.push(name);
        }
    }
    assert!(names.len() >= 23, "{names:?}");
    for name in &names {
        assert!(
            build.contains(&format!("\"hip/{name}\"")),
            "build.rs SOURCES lacks hip/{name}"
        );
        assert!(
            name.ends_with(".cu") || text.contains(&format!("#include \"{name}\"")),
            "hip/{name} is included nowhere"
        );
    }
}

/// Every v2 kernel has its dynamic shared memory in the PTX, more than the 48 KB a launch
/// gets without asking (else v2 would not need the attribute) and within sm_90's 227 KB per
/// block; the figures are the layout of hip/gemm_v2.h V2Shape, recomputed here by hand.
#[test]
fn ptx_v2_gemms_declare_their_shared_memory() {
    // (pair rows, split, code bits) -> stages x A + 2 B tiles + stages x raw codes, bytes.
    let layout = |tm: u32, split: bool, cb: u32| {
        let stages = if tm >= 64 { 3 } else { 4 };
        let a = stages * if split { 2 } else { 1 } * tm * 72 * 2;
        let b = 2 * 128 * 72 * 2;
        let w = stages * 2 * 128 * cb * 4;
        (a + b + w).max(tm * 132 * 4)
    };
    for (what, bytes) in [("sm_90", PTX_SM90), ("sm_80", PTX_SM80)] {
        for n in NAMES_V2 {
            let got = v2_smem(bytes, n).unwrap_or_else(|| panic!("{what}: no smem for {n}"));
            let rest = n.split_once("_v2_t").unwrap().1;
            let tm: u32 = rest.split('_').next().unwrap().parse().unwrap();
            let cb: u32 = rest.rsplit("_cb").next().unwrap().parse().unwrap();
            let want = layout(tm, n.contains("_split"), cb);
            assert_eq!(got, want, "{what}: {n}");
            assert!(
                got > 48 << 10 && got <= 227 << 10,
                "{what}: {n}: {got} bytes"
            );
        }
    }
    // The v1 kernels have none, a name outside the family gives none.
    assert_eq!(v2_smem(PTX_SM90, "moe_gemm1_cb4"), None);
}

/// Every mma GEMM has its dynamic shared memory in the PTX: hip/gemm_mma.h MmShape, by hand:
/// max(stages x (hi[, lo]) x pair cols x 256 bytes, the epilogue's pair cols x 129 f32), 3
/// stages for split 64-column tiles, else 4.
#[test]
fn ptx_mma_gemms_declare_their_shared_memory() {
    let layout = |tp: u32, split: bool| {
        let stages = if tp == 64 && split { 3 } else { 4 };
        let ring = stages * if split { 2 } else { 1 } * tp * 256;
        ring.max(tp * 129 * 4)
    };
    // Spot values: gpt-oss's split 64-column tile 96 KB, DeepSeek's 64 KB.
    assert_eq!(layout(64, true), 98_304);
    assert_eq!(layout(64, false), 65_536);
    for (what, bytes) in [("sm_90", PTX_SM90), ("sm_80", PTX_SM80)] {
        for n in NAMES_MMA.iter().filter(|n| n.starts_with("moe_gemm")) {
            let got = v2_smem(bytes, n).unwrap_or_else(|| panic!("{what}: no smem for {n}"));
            let rest = n.split_once("_mma_t").unwrap().1;
            let tp: u32 = rest.split('_').next().unwrap().parse().unwrap();
            assert_eq!(got, layout(tp, n.contains("_split")), "{what}: {n}");
            assert!(got <= 227 << 10, "{what}: {n}: {got} bytes");
        }
    }
    assert_eq!(v2_smem(PTX_SM90, "mx_to_bf16_p8"), None);
    // The wgmma GEMM (hip/gemm_wgmma.h WgShape): max(3 slots x (hi[, lo]) x pair cols x 256
    // bytes, the same epilogue tile); sm_90a only.
    // wg256: the epilogue tile of 256 weight rows, [pairs][257] f32.
    // wg256c: each k core column (pair cols x 16 bytes) padded by 16 bytes.
    let wg = |tp: u32, split: bool, rows: u32, c16: bool| {
        let kc = tp * 16 + if c16 { 16 } else { 0 };
        (3 * if split { 2 } else { 1 } * 16 * kc).max(tp * (rows + 1) * 4)
    };
    assert_eq!(wg(64, true, 128, false), 98_304);
    assert_eq!(wg(64, false, 256, false), 65_792);
    assert_eq!(wg(64, true, 256, true), 99_840);
    for n in NAMES_WGMMA.iter().filter(|n| n.starts_with("moe_gemm")) {
        let got = v2_smem(PTX_SM90, n).unwrap_or_else(|| panic!("no smem for {n}"));
        let tp: u32 = n
            .split_once("_mma_t")
            .unwrap()
            .1
            .split('_')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            got,
            wg(tp, n.contains("_split"), 256, n.contains("_wg256c_")),
            "{n}"
        );
        assert_eq!(v2_smem(PTX_SM80, n), None, "{n} in the sm_80 PTX");
    }
}

/// An llvm tool (objdump, readelf) that knows gfx950.
fn llvm_tool(tool: &str) -> String {
    let mut c: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var(format!("MXMOE_LLVM_{}", tool.to_ascii_uppercase())) {
        c.push(p);
    }
    for v in ["22", "21", "20"] {
        c.push(format!("/usr/lib/llvm-{v}/bin/llvm-{tool}"));
        c.push(format!("llvm-{tool}-{v}"));
    }
    let rocm = std::env::var("ROCM_PATH").unwrap_or_else(|_| "/opt/rocm".into());
    c.push(format!("{rocm}/llvm/bin/llvm-{tool}"));
    c.push(format!("llvm-{tool}"));
    for t in &c {
        if Command::new(t)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return t.clone();
        }
    }
    panic!(
        "no llvm-{tool} found (tried {}); install llvm-22 (Debian 12: apt-get install llvm-22) \
         or set MXMOE_LLVM_{}",
        c.join(", "),
        tool.to_ascii_uppercase()
    );
}

/// Kernel name -> its disassembly, for one code object.
fn disassemble(name: &str, mcpu: &str, bytes: &[u8]) -> (BTreeMap<String, String>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.hsaco"));
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new(llvm_tool("objdump"))
        .args(["-d", &format!("--mcpu={mcpu}")])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut m = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    for l in text.lines() {
        // "0000000000001900 <moe_gemm1_cb4>:"
        if l.ends_with(">:") {
            if let Some((n, t)) = cur.take() {
                m.insert(n, t);
            }
            let n = l
                .split('<')
                .nth(1)
                .unwrap()
                .trim_end_matches(">:")
                .to_string();
            cur = Some((n, String::new()));
        } else if let Some((_, t)) = cur.as_mut() {
            t.push_str(l);
            t.push('\n');
        }
    }
    if let Some((n, t)) = cur {
        m.insert(n, t);
    }
    let notes = Command::new(llvm_tool("readelf"))
        .args(["--notes"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        notes.status.success(),
        "{}",
        String::from_utf8_lossy(&notes.stderr)
    );
    (m, String::from_utf8_lossy(&notes.stdout).into_owned())
}

/// Per kernel in the AMDGPU metadata: (private segment bytes, VGPR spills, SGPR spills).
fn scratch(notes: &str) -> BTreeMap<String, (u64, u64, u64)> {
    let mut m = BTreeMap::new();
    let mut name = String::new();
    let mut v = (0, 0, 0);
    let num = |l: &str| {
        l.rsplit(':')
            .next()
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap_or(u64::MAX)
    };
    for l in notes.lines().map(str::trim) {
        if let Some(n) = l.strip_prefix(".name:") {
            if !name.is_empty() {
                m.insert(std::mem::take(&mut name), v);
            }
            name = n.trim().to_string();
            v = (0, 0, 0);
        } else if l.starts_with(".private_segment_fixed_size:") {
            v.0 = num(l);
        } else if l.starts_with(".vgpr_spill_count:") {
            v.1 = num(l);
        } else if l.starts_with(".sgpr_spill_count:") {
            v.2 = num(l);
        }
    }
    if !name.is_empty() {
        m.insert(name, v);
    }
    m
}

#[test]
fn amd_gemms_use_mfma_and_hot_kernels_no_scratch() {
    for (target, bytes) in [("gfx942", GFX942), ("gfx950", GFX950)] {
        let (funcs, notes) = disassemble(target, target, bytes);
        let mut expected: Vec<&str> = NAMES.iter().chain(&NAMES_MORE).copied().collect();
        if target == "gfx950" {
            expected.extend(NAMES_GFX950);
        }
        for n in &expected {
            assert!(
                funcs.contains_key(*n),
                "{target}: kernel {n} not in the disassembly"
            );
        }
        let mut checked = 0;
        for (n, text) in &funcs {
            if !n.starts_with("moe_gemm") {
                continue;
            }
            checked += 1;
            if n.contains("_mx_") {
                assert_eq!(target, "gfx950", "{n} outside gfx950");
                assert!(
                    text.contains("v_mfma_scale_f32_16x16x128_f8f6f4"),
                    "{target}: {n} has no scaled MFMA"
                );
            } else {
                assert!(
                    text.contains("v_mfma_f32_16x16x16_bf16"),
                    "{target}: {n} has no bf16 MFMA"
                );
            }
        }
        assert_eq!(
            checked,
            if target == "gfx950" { 26 } else { 12 },
            "{target}: GEMM kernels"
        );
        let sc = scratch(&notes);
        assert!(
            sc.len() >= expected.len(),
            "{target}: metadata lists {} kernels",
            sc.len()
        );
        // Scratch = private segment memory (VGPR spills go there); SGPR spills land in VGPR
        // lanes and cost no memory traffic while the private segment stays empty.
        for (n, (private, vspill, _sspill)) in &sc {
            if hot(n) {
                assert!(
                    *private == 0 && *vspill == 0,
                    "{target}: {n} uses scratch: {private} private bytes, {vspill} VGPR spills"
                );
            }
        }
    }
}
