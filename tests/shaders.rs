//! Every WGSL shader is parsed and validated by naga 30 with the capabilities we target (none
//! beyond core WGSL: no f16, no subgroups, no 64-bit integers), then specialised with every
//! override combination the backend uses and translated to SPIR-V (what wgpu does on Vulkan).
//! A missing `shaders/` directory, a file not listed in `source.rs`, or a listed file that is
//! not on disk FAILS (never a silent pass).

use mxmoe::backend::wgpu::source;
use mxmoe::format::{MxFormat, ScaleMode};
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn shader_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders")
}

/// Parse + validate; panics with naga's rendered diagnostics.
fn validate(name: &str, src: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(src)));
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: validation error:\n{}", e.emit_to_string(src)));
    (module, info)
}

/// Specialise `entry` with `overrides` and write SPIR-V.
fn specialise(
    name: &str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    overrides: &[(&str, u32)],
) {
    let mut consts = naga::back::PipelineConstants::default();
    for (k, v) in overrides {
        consts.insert(k.to_string(), *v as f64);
    }
    let (m, i) = naga::back::pipeline_constants::process_overrides(
        module,
        info,
        Some((naga::ShaderStage::Compute, entry)),
        &consts,
    )
    .unwrap_or_else(|e| panic!("{name}/{entry} {overrides:?}: overrides: {e}"));
    let opts = spv::Options::default();
    let popts = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    spv::write_vec(&m, &i, &opts, Some(&popts))
        .unwrap_or_else(|e| panic!("{name}/{entry} {overrides:?}: SPIR-V: {e}"));
}

#[test]
fn shader_dir_matches_source_rs() {
    let dir = shader_dir();
    let rd = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("shader directory {} unreadable: {e}", dir.display()));
    let mut on_disk: Vec<String> = rd
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    on_disk.sort();
    assert!(!on_disk.is_empty(), "no .wgsl files in {}", dir.display());
    let mut listed: Vec<String> = source::SHADERS
        .iter()
        .map(|(_, f, _)| f.to_string())
        .collect();
    listed.push("mx_common.wgsl".into());
    listed.push("exact_math.wgsl".into());
    listed.sort();
    assert_eq!(on_disk, listed, "shaders/ and source.rs disagree");
    for (_, file, src) in source::SHADERS {
        let disk = std::fs::read_to_string(dir.join(file)).unwrap();
        assert_eq!(disk, src, "{file}: the compiled-in source is stale");
    }
}

#[test]
fn mx_common_alone_validates() {
    let src = format!("{}{}", source::preamble(), source::MX_COMMON);
    validate("mx_common", &src);
}

#[test]
fn quant_all_formats_and_modes() {
    let src = source::compose("quant").unwrap();
    let (m, i) = validate("quant", &src);
    for f in MxFormat::ALL {
        for md in ScaleMode::ALL {
            for entry in ["quantize", "dequantize", "qdq"] {
                specialise(
                    "quant",
                    &m,
                    &i,
                    entry,
                    &[("FMT", f.id()), ("MODE", md.id())],
                );
            }
        }
    }
}

#[test]
fn route_validates() {
    let src = source::compose("route").unwrap();
    let (m, i) = validate("route", &src);
    specialise("route", &m, &i, "route", &[]);
}

#[test]
fn moe_all_variants() {
    let src = source::compose("moe").unwrap();
    let (m, i) = validate("moe", &src);
    for entry in ["lists", "combine"] {
        specialise("moe", &m, &i, entry, &[]);
    }
    specialise("moe", &m, &i, "lists", &[("TILE_M", 8)]);
    let mut afmts: Vec<u32> = MxFormat::ALL.iter().map(|f| f.id()).collect();
    afmts.push(255);
    for w in MxFormat::ALL {
        for &a in &afmts {
            for act in [0u32, 1] {
                for entry in ["gemm1", "gemm2", "gemv1", "gemv2"] {
                    specialise(
                        "moe",
                        &m,
                        &i,
                        entry,
                        &[
                            ("WFMT", w.id()),
                            ("AFMT", a),
                            ("AMODE", 1),
                            ("ACT", act),
                            ("BF16", act),
                        ],
                    );
                }
            }
        }
    }
    for md in ScaleMode::ALL {
        specialise(
            "moe",
            &m,
            &i,
            "gemm1",
            &[("WFMT", 0), ("AFMT", 0), ("AMODE", md.id()), ("ACT", 0)],
        );
    }
}
