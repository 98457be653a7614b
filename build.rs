//! Build script: with feature `hip`, compile the HIP kernels under `hip/` ahead of time with clang
//! and leave the binaries in OUT_DIR for `src/backend/hip/kernels.rs` to embed:
//!
//! * PTX for NVIDIA (`-x cuda --cuda-gpu-arch=sm_90a` for the H100 / H200: arch-specific, for the
//!   wgmma GEMM; and sm_80 for Ampere / Ada and newer than Hopper), loaded through the CUDA
//!   driver, which JIT-compiles it for the GPU at hand;
//! * code objects for AMD gfx942 (MI300X / MI300A / MI325X) and gfx950 (MI350 / MI355)
//!   (`-x hip --offload-arch=...`), loaded through HIP's module API.
//!
//! No vendor SDK header is used (`-nocudainc -nocudalib`, `-nogpuinc -nogpulib`; hip/mx_compat.h
//! holds the few primitives). Compilers: `$MXMOE_HIP_CLANG` for every target, or per target
//! `$MXMOE_HIP_CLANG_PTX`, `..._GFX942`, `..._GFX950`; else ROCm's clang (`$ROCM_PATH/llvm/bin/
//! clang`, what hipcc runs) when it knows the target, else Debian's clang-NN (gfx942: clang-19 or
//! newer; gfx950: clang-20 or newer, `clang-22` in Debian 12's security updates). A missing
//! compiler is one build error naming the package to install. Without the feature: nothing.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// hip/mxmoe.cu and every file under hip/ it includes (a change to any rebuilds the kernels); the
/// test `build_rs_lists_every_hip_source` (src/backend/hip/kernels.rs) checks the list.
const SOURCES: [&str; 24] = [
    "hip/mxmoe.cu",
    "hip/mx_compat.h",
    "hip/mx_formats.h",
    "hip/mx_common.h",
    "hip/exact_math.h",
    "hip/mx_fragment.h",
    "hip/nv4.h",
    "hip/quant.h",
    "hip/route.h",
    "hip/moe_common.h",
    "hip/gemv_epilogue.h",
    "hip/lists.h",
    "hip/route_warp.h",
    "hip/route_lists_w3.h",
    "hip/moe_tile.h",
    "hip/gemv.h",
    "hip/gemv_mma.h",
    "hip/gemm_v1.h",
    "hip/gemm_v2.h",
    "hip/gemm_mma.h",
    "hip/gemm_wgmma.h",
    "hip/p8_fused.h",
    "hip/gemm_mx.h",
    "hip/combine.h",
];

struct Target {
    /// File stem in OUT_DIR and the environment-variable suffix.
    name: &'static str,
    /// Arguments after the compiler.
    args: &'static [&'static str],
    /// Output file extension.
    ext: &'static str,
    /// Candidate compilers, best first (ROCm's clang is prepended for AMD targets).
    candidates: &'static [&'static str],
    /// What to install when none works.
    install: &'static str,
}

const COMMON: &[&str] = &["-O3", "-std=c++17", "-Wall", "-Wno-unused-function"];

const TARGETS: [Target; 4] = [
    Target {
        name: "sm90",
        args: &["-x", "cuda", "--cuda-gpu-arch=sm_90a", "--cuda-device-only", "-nocudainc", "-nocudalib", "-S"],
        ext: "ptx",
        candidates: &["clang-19", "clang-20", "clang-21", "clang-22", "clang"],
        install: "clang-19 (apt-get install clang-19 lld-19)",
    },
    Target {
        name: "sm80",
        args: &["-x", "cuda", "--cuda-gpu-arch=sm_80", "--cuda-device-only", "-nocudainc", "-nocudalib", "-S"],
        ext: "ptx",
        candidates: &["clang-19", "clang-20", "clang-21", "clang-22", "clang"],
        install: "clang-19 (apt-get install clang-19 lld-19)",
    },
    Target {
        name: "gfx942",
        args: &["-x", "hip", "--offload-arch=gfx942", "--offload-device-only", "--no-gpu-bundle-output", "-nogpuinc", "-nogpulib"],
        ext: "hsaco",
        candidates: &["clang-19", "clang-20", "clang-21", "clang-22", "clang"],
        install: "clang-19 and lld-19 (apt-get install clang-19 lld-19), or ROCm (hipcc)",
    },
    Target {
        name: "gfx950",
        args: &["-x", "hip", "--offload-arch=gfx950", "--offload-device-only", "--no-gpu-bundle-output", "-nogpuinc", "-nogpulib"],
        ext: "hsaco",
        candidates: &["clang-22", "clang-21", "clang-20", "clang"],
        install: "clang-22 and lld-22 (Debian 12: apt-get install clang-22 lld-22, from bookworm-security), or ROCm 6.3+ (hipcc)",
    },
];

fn try_compile(cc: &str, t: &Target, src: &Path, inc: &Path, out: &Path) -> Result<(), String> {
    let o = Command::new(cc)
        .args(t.args)
        .args(COMMON)
        .arg("-I")
        .arg(inc)
        .arg("-o")
        .arg(out)
        .arg(src)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if o.status.success() && out.exists() {
        let warnings = String::from_utf8_lossy(&o.stderr);
        for l in warnings.lines().filter(|l| l.contains("warning")) {
            println!("cargo:warning={}: {l}", t.name);
        }
        Ok(())
    } else {
        Err(format!(
            "{cc}: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .take(12)
                .collect::<Vec<_>>()
                .join("\n  ")
        ))
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for v in [
        "MXMOE_HIP_CLANG",
        "MXMOE_HIP_CLANG_PTX",
        "MXMOE_HIP_CLANG_GFX942",
        "MXMOE_HIP_CLANG_GFX950",
        "ROCM_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if env::var_os("CARGO_FEATURE_HIP").is_none() {
        return;
    }
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let src = root.join("hip/mxmoe.cu");
    let inc = root.join("hip");
    let rocm = env::var("ROCM_PATH").unwrap_or_else(|_| "/opt/rocm".into());
    // The four targets compile in parallel (each is one clang process).
    let results: Vec<Result<String, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = TARGETS
            .iter()
            .map(|t| {
                let (src, inc, out_dir, rocm) = (&src, &inc, &out_dir, &rocm);
                sc.spawn(move || build_target(t, src, inc, out_dir, rocm))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let built: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().cloned())
        .collect();
    let missing: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().cloned())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "\n\nfeature `hip`: cannot compile the HIP kernels (hip/mxmoe.cu) for:\n{}\n\
             (scripts/test.sh installs them on Debian/Ubuntu; MXMOE_HIP_CLANG=/path/to/clang \
             overrides the compiler)\n",
            missing.join("\n")
        );
        std::process::exit(1);
    }
    std::fs::write(out_dir.join("mxmoe_hip_built.txt"), built.join("\n")).unwrap();
}

/// Compile one target with the first compiler that works: Ok("target: compiler (version)") or
/// Err(what to install, what was tried, and a real compiler's errors).
fn build_target(
    t: &Target,
    src: &Path,
    inc: &Path,
    out_dir: &Path,
    rocm: &str,
) -> Result<String, String> {
    let out = out_dir.join(format!("mxmoe_{}.{}", t.name, t.ext));
    let var = if t.ext == "ptx" {
        "PTX".to_string()
    } else {
        t.name.to_ascii_uppercase()
    };
    let mut cands: Vec<String> = Vec::new();
    if let Ok(c) =
        env::var(format!("MXMOE_HIP_CLANG_{var}")).or_else(|_| env::var("MXMOE_HIP_CLANG"))
    {
        cands.push(c);
    } else {
        if t.ext == "hsaco" {
            cands.push(format!("{rocm}/llvm/bin/clang"));
        }
        cands.extend(t.candidates.iter().map(|s| s.to_string()));
    }
    let mut errs = Vec::new();
    for cc in &cands {
        match try_compile(cc, t, src, inc, &out) {
            Ok(()) => {
                let v = Command::new(cc)
                    .arg("--version")
                    .output()
                    .ok()
                    .and_then(|o| String::from_utf8(o.stdout).ok())
                    .and_then(|s| s.lines().next().map(str::to_owned))
                    .unwrap_or_default();
                return Ok(format!("{}: {cc} ({v})", t.name));
            }
            Err(e) => errs.push(e),
        }
    }
    // The errors of a compiler that exists (a bug in the kernels) come first; "not found"
    // lines only say what was tried.
    let real: Vec<&String> = errs
        .iter()
        .filter(|e| !e.contains("No such file"))
        .collect();
    Err(format!(
        "  {} ({}): install {}{}\n  tried: {}",
        t.name,
        t.args.iter().find(|a| a.contains("arch")).unwrap_or(&""),
        t.install,
        if real.is_empty() {
            String::new()
        } else {
            format!(
                "\n  compiler errors:\n  {}",
                real.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  ")
            )
        },
        cands.join(", ")
    ))
}
