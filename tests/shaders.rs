//! Every shader ([`Shader::ALL`]: a new variant is covered automatically) is composed, parsed
//! and validated by naga 30 with the capabilities we target (none beyond core WGSL: no f16, no
//! subgroups, no 64-bit integers, except f16 conversions and subgroup operations in the shaders
//! that declare them: `Shader::needs_f16_in_f32`, `Shader::needs_subgroup`, and f16 with
//! cooperative matrices in `Shader::needs_coop`, the cooperative-matrix GEMM: validated here
//! although no CI adapter runs it); every entry point is specialised with the default overrides
//! and translated to SPIR-V (what wgpu does on Vulkan), and so is every override combination the
//! backend uses. A missing `shaders/` directory, a file not listed in `source.rs`, a listed file
//! that is not on disk or that no shader uses FAILS (never a silent pass). The generated id
//! constants are checked against the Rust enums, and the WGSL against comparing those ids with
//! number literals.

mod shader_bounds;

use mxmoe::backend::wgpu::source::{self, Shader};
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::moe::{Activation, Scoring};
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn shader_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders")
}

/// Parse + validate; panics with naga's rendered diagnostics.
fn validate(name: &str, src: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(src)));
    // Only a shader that declares it may convert f16 (Shader::needs_f16_in_f32).
    let mut caps = Capabilities::empty();
    let sh = Shader::ALL.iter().find(|s| s.name() == name);
    if sh.is_some_and(|s| s.needs_f16_in_f32()) {
        caps |= Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    }
    // Only a shader that declares it may use subgroup operations (Shader::needs_subgroup).
    if sh.is_some_and(|s| s.needs_subgroup()) {
        caps |= Capabilities::SUBGROUP;
    }
    // Only the cooperative-matrix GEMM may use f16 and cooperative matrices (Shader::needs_coop).
    if sh.is_some_and(|s| s.needs_coop()) {
        caps |= Capabilities::SHADER_FLOAT16 | Capabilities::COOPERATIVE_MATRIX;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .subgroup_stages(naga::valid::ShaderStages::COMPUTE)
        .subgroup_operations(naga::valid::SubgroupOperationSet::all())
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
    let mut listed: Vec<String> = source::FILES.iter().map(|f| f.name.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "shaders/ and source::FILES disagree");
    for f in source::FILES {
        let disk = std::fs::read_to_string(dir.join(f.name)).unwrap();
        assert_eq!(disk, f.src, "{}: the compiled-in source is stale", f.name);
        assert!(
            Shader::ALL
                .iter()
                .any(|s| s.files().contains(&f) || s.files_multi().is_some_and(|m| m.contains(&f))),
            "{} is used by no Shader",
            f.name
        );
    }
}

/// Every shader validates, and every entry point specialises (default overrides) and translates.
#[test]
fn every_shader_validates_and_translates() {
    for sh in Shader::ALL {
        let src = sh.compose();
        let (m, i) = validate(sh.name(), &src);
        assert!(!m.entry_points.is_empty(), "{sh}: no entry points");
        for ep in &m.entry_points {
            specialise(sh.name(), &m, &i, &ep.name, &[]);
        }
    }
}

#[test]
fn mx_common_alone_validates() {
    let src = format!("{}{}", source::preamble(), source::MX_COMMON.src);
    validate("mx_common", &src);
}

/// The id constants of the generated preamble, evaluated by naga, equal the Rust enums' ids.
#[test]
fn generated_ids_match_rust_enums() {
    let src = source::preamble();
    let (m, _) = validate("preamble", &src);
    let value = |name: &str| -> u32 {
        let c = m
            .constants
            .iter()
            .map(|(_, c)| c)
            .find(|c| c.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("the preamble has no constant {name}"));
        match m.global_expressions[c.init] {
            naga::Expression::Literal(naga::Literal::U32(v)) => v,
            ref e => panic!("{name} = {e:?}, not a u32 literal"),
        }
    };
    let mut want: Vec<(String, u32)> = Vec::new();
    for f in MxFormat::ALL {
        want.push((format!("FMT_{}", f.name().to_ascii_uppercase()), f.id()));
    }
    want.push(("FMT_NONE".into(), source::FMT_NONE));
    for md in ScaleMode::ALL {
        want.push((format!("SCALE_{}", md.name().to_ascii_uppercase()), md.id()));
    }
    for sc in Scoring::ALL {
        want.push((
            format!("SCORING_{}", sc.name().to_ascii_uppercase()),
            sc.id(),
        ));
    }
    for a in Activation::ALL {
        want.push((format!("ACT_{}", a.name().to_ascii_uppercase()), a.id()));
    }
    for (name, id) in &want {
        assert_eq!(value(name), *id, "{name}");
    }
    assert_eq!(source::id_constants(), want);
    // Ids are distinct within each enum; FMT_NONE is no format.
    for prefix in ["FMT_", "SCALE_", "SCORING_", "ACT_"] {
        let mut ids: Vec<u32> = want
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(_, v)| *v)
            .collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate {prefix}* ids");
    }
}

/// The WGSL never compares a format, scale mode, scoring or activation with a number literal
/// (it uses the generated FMT_* / SCALE_* / SCORING_* / ACT_* names).
#[test]
fn no_magic_ids_in_wgsl() {
    let ids = [
        "WEIGHT_FMT",
        "ACT_FMT",
        "ACT_SCALE_MODE",
        "ACTIVATION",
        "FMT",
        "MODE",
        "mode",
        "scoring",
        "f",
    ];
    for file in source::FILES {
        for (ln, line) in file.src.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            for id in ids {
                for op in ["==", "!="] {
                    for (pos, _) in code.match_indices(&format!("{id} {op} ")) {
                        let before = code[..pos].chars().next_back();
                        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                            continue; // a longer identifier
                        }
                        let rest = &code[pos + id.len() + op.len() + 2..];
                        assert!(
                            !rest.starts_with(|c: char| c.is_ascii_digit()),
                            "{}:{}: `{}` compares an id with a number",
                            file.name,
                            ln + 1,
                            line.trim()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn quant_all_formats_and_modes() {
    let src = Shader::Quant.compose();
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
fn moe_all_variants() {
    let (m, i) = validate("moe_lists", &Shader::MoeLists.compose());
    specialise("moe_lists", &m, &i, "lists", &[("TILE_M", 8)]);
    let (m, i) = validate("moe_combine", &Shader::MoeCombine.compose());
    specialise("moe_combine", &m, &i, "combine", &[("ROUND_BF16", 1)]);
    let mut afmts: Vec<u32> = MxFormat::ALL.iter().map(|f| f.id()).collect();
    afmts.push(source::FMT_NONE);
    for (sh, entries) in [
        (Shader::MoeGemm, &["gemm1", "gemm2"][..]),
        (
            Shader::MoeGemmCoop,
            &["coop_gemm1", "coop_gemm2", "coop64_gemm1", "coop64_gemm2"][..],
        ),
        (
            Shader::MoeGemv {
                registers: false,
                subgroup: false,
            },
            &["gemv1", "gemv2"][..],
        ),
        (
            Shader::MoeGemv {
                registers: true,
                subgroup: false,
            },
            &["gemv1", "gemv2"][..],
        ),
        (
            Shader::MoeGemv {
                registers: false,
                subgroup: true,
            },
            &["gemv1", "gemv2"][..],
        ),
        (
            Shader::MoeGemv {
                registers: true,
                subgroup: true,
            },
            &["gemv1", "gemv2"][..],
        ),
    ] {
        let (m, i) = validate(sh.name(), &sh.compose());
        for w in MxFormat::ALL {
            for &a in &afmts {
                for act in Activation::ALL {
                    for entry in entries {
                        specialise(
                            sh.name(),
                            &m,
                            &i,
                            entry,
                            &[
                                ("WEIGHT_FMT", w.id()),
                                ("ACT_FMT", a),
                                ("ACT_SCALE_MODE", ScaleMode::Even.id()),
                                ("ACTIVATION", act.id()),
                                ("ROUND_BF16", act.id()),
                            ],
                        );
                    }
                }
            }
        }
        for md in ScaleMode::ALL {
            specialise(
                sh.name(),
                &m,
                &i,
                entries[0],
                &[
                    ("WEIGHT_FMT", MxFormat::Fp4E2M1.id()),
                    ("ACT_FMT", MxFormat::Fp4E2M1.id()),
                    ("ACT_SCALE_MODE", md.id()),
                    ("ACTIVATION", Activation::Silu.id()),
                ],
            );
        }
        // The cooperative GEMM's B layouts (and coop_check with each).
        if sh == Shader::MoeGemmCoop {
            for brow in [0u32, 1] {
                for entry in ["coop_gemm1", "coop_gemm2", "coop_check"] {
                    specialise(sh.name(), &m, &i, entry, &[("COOP_B_ROW", brow)]);
                }
            }
            // Kernel k64 with FP4 decoded in registers and through the code table, every
            // weight format (the register decode applies to FP4 only), and its check.
            for regs in [0u32, 1] {
                for w in MxFormat::ALL {
                    for entry in ["coop64_gemm1", "coop64_gemm2"] {
                        specialise(
                            sh.name(),
                            &m,
                            &i,
                            entry,
                            &[("COOP_FP4_REGISTERS", regs), ("WEIGHT_FMT", w.id())],
                        );
                    }
                }
            }
            specialise(sh.name(), &m, &i, "coop64_check", &[]);
            // Kernel k64p (A from the pre-converted storage rows): every weight format, FP4
            // in registers and through the table, weight-only and MX activations, both
            // activations, the diagnostic masks, and its check.
            for regs in [0u32, 1] {
                for w in MxFormat::ALL {
                    for &a in &[
                        source::FMT_NONE,
                        MxFormat::Fp4E2M1.id(),
                        MxFormat::Fp8E4M3.id(),
                    ] {
                        for act in Activation::ALL {
                            for entry in [
                                "coop64p_gemm1",
                                "coop64p_gemm2",
                                "coop64pw_gemm1",
                                "coop64pw_gemm2",
                            ] {
                                specialise(
                                    sh.name(),
                                    &m,
                                    &i,
                                    entry,
                                    &[
                                        ("COOP_FP4_REGISTERS", regs),
                                        ("WEIGHT_FMT", w.id()),
                                        ("ACT_FMT", a),
                                        ("ACTIVATION", act.id()),
                                    ],
                                );
                            }
                        }
                    }
                }
            }
            for diag in [2u32, 4, 8] {
                for entry in [
                    "coop64p_gemm1",
                    "coop64p_gemm2",
                    "coop64pw_gemm1",
                    "coop64pw_gemm2",
                ] {
                    specialise(sh.name(), &m, &i, entry, &[("COOP_DIAG", diag)]);
                }
            }
            specialise(sh.name(), &m, &i, "coop64p_check", &[]);
        }
        // The subgroup GEMV layouts the backend may choose (rows per group x subgroup size).
        if matches!(sh, Shader::MoeGemv { subgroup: true, .. }) {
            for (prefetch, words, lanes) in [
                (0u32, 0u32, 32u32),
                (1, 0, 32),
                (0, 1, 32),
                (1, 1, 32),
                (1, 1, 8),
                (0, 1, 64),
            ] {
                let threads = 8 * lanes;
                for entry in entries.iter().chain(&["subgroup_check"]) {
                    specialise(
                        sh.name(),
                        &m,
                        &i,
                        entry,
                        &[
                            ("WEIGHT_FMT", MxFormat::Fp4E2M1.id()),
                            ("ACT_FMT", MxFormat::Fp4E2M1.id()),
                            ("GEMV_PREFETCH", prefetch),
                            ("GEMV_WORDS", words),
                            ("GEMV_OWN_LISTS", prefetch),
                            ("GEMV_FUSE_COMBINE", words),
                            ("GEMV_ONE_ROW", prefetch),
                            ("GEMV_LANES", lanes),
                            ("GEMV_THREADS", threads),
                        ],
                    );
                }
            }
        }
    }
}

/// Bytes of workgroup memory entry point `entry` of `m` uses (the sizes of the workgroup
/// variables its code reaches, naga's layout).
/// The bindings (group 0) an entry point uses, sorted: what wgpu's derived pipeline layout
/// holds, so what a bind group for it must name exactly.
fn entry_bindings(m: &naga::Module, info: &naga::valid::ModuleInfo, entry: &str) -> Vec<u32> {
    let (i, _) = m
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, e)| e.name == entry)
        .unwrap_or_else(|| panic!("no entry point {entry}"));
    let fi = info.get_entry_point(i);
    let mut v: Vec<u32> = m
        .global_variables
        .iter()
        .filter(|(h, _)| !fi[*h].is_empty())
        .filter_map(|(_, g)| g.binding.as_ref().map(|b| b.binding))
        .collect();
    v.sort_unstable();
    v
}

/// The multi-chunk compositions (moe_weights_multi.wgsl in place of moe_weights_one.wgsl) of
/// every shader that reads expert weights validate; each entry point binds exactly what its
/// one-chunk composition binds plus, for each weight binding it uses (7 codes, 8 scales, 13 the
/// codes' vec4 view), the same binding of chunks 1..3 (`MULTI_WEIGHT_BINDINGS`, what
/// src/backend/wgpu/fwd_cache.rs adds to a bind group); the most storage buffers any entry point
/// binds is `MULTI_STORAGE_BINDINGS` (what the backend compares with the adapter's limit before
/// it runs the multi-chunk passes); the weight-reading entry points specialise and translate
/// with 2, 3 and 4 chunks. Shaders that read no weights have no multi-chunk composition.
#[test]
fn multi_chunk_weights_bindings() {
    use mxmoe::backend::wgpu::MULTI_STORAGE_BINDINGS;
    use source::{MAX_CHUNKS_PER_PASS, MULTI_WEIGHT_BINDINGS};
    assert_eq!(MULTI_WEIGHT_BINDINGS.len() + 1, MAX_CHUNKS_PER_PASS);
    let mut most = 0;
    let mut weight_entries = 0;
    for sh in Shader::ALL {
        let Some(src) = sh.compose_multi() else {
            assert!(!sh.reads_weights(), "{sh}");
            assert!(
                !sh.compose().contains("---- moe_weights_multi.wgsl ----"),
                "{sh}"
            );
            continue;
        };
        let (m1, i1) = validate(sh.name(), &sh.compose());
        let (m, i) = validate(sh.name(), &src);
        for ep in &m.entry_points {
            let one = entry_bindings(&m1, &i1, &ep.name);
            let mut want = one.clone();
            for set in MULTI_WEIGHT_BINDINGS {
                for (k, base) in [7u32, 8, 13].into_iter().enumerate() {
                    if one.contains(&base) {
                        want.push(set[k]);
                    }
                }
            }
            want.sort_unstable();
            let got = entry_bindings(&m, &i, &ep.name);
            assert_eq!(got, want, "{sh}/{}", ep.name);
            let (idx, _) = m
                .entry_points
                .iter()
                .enumerate()
                .find(|(_, e)| e.name == ep.name)
                .unwrap();
            let fi = i.get_entry_point(idx);
            let storage = m
                .global_variables
                .iter()
                .filter(|(h, g)| {
                    !fi[*h].is_empty() && matches!(g.space, naga::AddressSpace::Storage { .. })
                })
                .count() as u32;
            most = most.max(storage);
            if got.len() > one.len() {
                weight_entries += 1;
                for n in 2..=MAX_CHUNKS_PER_PASS as u32 {
                    specialise(sh.name(), &m, &i, &ep.name, &[("W_CHUNKS", n)]);
                }
            }
        }
    }
    assert!(
        weight_entries >= 10,
        "only {weight_entries} entry points read weights"
    );
    assert_eq!(
        most, MULTI_STORAGE_BINDINGS,
        "the most storage buffers of one expert pass"
    );
}

/// Kernels k64p and k64pw: the bindings the backend names for their GEMMs and pre-passes
/// (src/backend/wgpu/prepass.rs) are exactly those naga finds the entry points use (a bind group
/// naming one more or one fewer fails on the device); its workgroup memory is the backend's
/// figure (`COOP64P_WORKGROUP_BYTES`, what `check_coop64p` compares with the adapter's limit)
/// and holds no activation tile; every kernel's entry points exist in the shader; the
/// pre-passes need no f16.
#[test]
fn coop64p_bindings_and_memory() {
    use mxmoe::backend::wgpu::{
        CoopKernel, COOP64PW_BINDINGS, COOP64P_BINDINGS, COOP64P_WORKGROUP_BYTES,
        COOP64_WORKGROUP_BYTES, COOPP_PREP1_BINDINGS, COOPP_PREP2_BINDINGS, GEMM_PRE_REF_BINDINGS,
    };
    let sh = Shader::MoeGemmCoop;
    let (m, i) = validate(sh.name(), &sh.compose());
    for entry in ["coop64p_gemm1", "coop64p_gemm2"] {
        assert_eq!(
            entry_bindings(&m, &i, entry),
            COOP64P_BINDINGS.to_vec(),
            "{entry}"
        );
    }
    for entry in ["coop64pw_gemm1", "coop64pw_gemm2"] {
        assert_eq!(
            entry_bindings(&m, &i, entry),
            COOP64PW_BINDINGS.to_vec(),
            "{entry}"
        );
        // k64pw keeps k64's tiles (A copied into them): the same workgroup memory.
        let wg = workgroup_bytes(&m, &i, entry);
        let k64 = workgroup_bytes(&m, &i, &entry.replace("pw", ""));
        assert_eq!(wg, k64, "{entry}");
    }
    // The check binds its output and the A rows only.
    assert_eq!(entry_bindings(&m, &i, "coop64p_check"), vec![9, 17]);
    for (_, k) in CoopKernel::NAMES {
        let (g1, g2) = k.entries();
        for e in [g1, g2] {
            assert!(
                m.entry_points.iter().any(|p| p.name == e),
                "{k:?}: no entry {e}"
            );
        }
    }
    let g1 = workgroup_bytes(&m, &i, "coop64p_gemm1");
    let g2 = workgroup_bytes(&m, &i, "coop64p_gemm2");
    println!("coop64p_gemm1: {g1} B, coop64p_gemm2: {g2} B");
    assert_eq!(g1, COOP64P_WORKGROUP_BYTES);
    assert_eq!(g2 + 512, g1);
    assert_eq!(
        COOP64_WORKGROUP_BYTES - g1,
        2 * 64 * 72 * 2,
        "the activation tiles are gone"
    );
    let pp = Shader::MoeCoopPrepass;
    assert!(!pp.needs_coop() && !pp.needs_f16_in_f32() && !pp.needs_subgroup());
    let (m, i) = validate(pp.name(), &pp.compose());
    assert_eq!(
        entry_bindings(&m, &i, "coopp_prep1"),
        COOPP_PREP1_BINDINGS.to_vec()
    );
    assert_eq!(
        entry_bindings(&m, &i, "coopp_prep2"),
        COOPP_PREP2_BINDINGS.to_vec()
    );
    for entry in ["gemm1_pre_ref", "gemm2_pre_ref"] {
        assert_eq!(
            entry_bindings(&m, &i, entry),
            GEMM_PRE_REF_BINDINGS.to_vec(),
            "{entry}"
        );
        for w in MxFormat::ALL {
            for &a in &[source::FMT_NONE, MxFormat::Fp4E2M1.id()] {
                for act in Activation::ALL {
                    specialise(
                        pp.name(),
                        &m,
                        &i,
                        entry,
                        &[
                            ("WEIGHT_FMT", w.id()),
                            ("ACT_FMT", a),
                            ("ACTIVATION", act.id()),
                        ],
                    );
                }
            }
        }
    }
    let mut afmts: Vec<u32> = MxFormat::ALL.iter().map(|f| f.id()).collect();
    afmts.push(source::FMT_NONE);
    for a in afmts {
        for entry in ["coopp_prep1", "coopp_prep2"] {
            specialise(pp.name(), &m, &i, entry, &[("ACT_FMT", a)]);
        }
    }
}

fn workgroup_bytes(m: &naga::Module, info: &naga::valid::ModuleInfo, entry: &str) -> u32 {
    let mut lay = naga::proc::Layouter::default();
    lay.update(m.to_ctx()).unwrap();
    let (i, _) = m
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, e)| e.name == entry)
        .unwrap_or_else(|| panic!("no entry point {entry}"));
    let fi = info.get_entry_point(i);
    m.global_variables
        .iter()
        .filter(|(h, g)| g.space == naga::AddressSpace::WorkGroup && !fi[*h].is_empty())
        .map(|(_, g)| lay[g.ty].size)
        .sum()
}

/// The cooperative GEMM's kernel k64: the backend's figure of its workgroup memory
/// (`COOP64_WORKGROUP_BYTES`, what `check_coop64` compares with the adapter's limit) is naga's
/// for coop64_gemm1 (gemm2 needs 512 B less), it fits the H200's Vulkan limit (48 KiB), and it holds no FP4 byte
/// table and none of the tiled GEMM's or kernel k32's tiles (only what its call graph names).
#[test]
fn coop64_workgroup_memory() {
    use mxmoe::backend::wgpu::COOP64_WORKGROUP_BYTES;
    let sh = Shader::MoeGemmCoop;
    let (m, i) = validate(sh.name(), &sh.compose());
    let k32 = workgroup_bytes(&m, &i, "coop_gemm1");
    let g1 = workgroup_bytes(&m, &i, "coop64_gemm1");
    let g2 = workgroup_bytes(&m, &i, "coop64_gemm2");
    println!("coop64_gemm1: {g1} B, coop64_gemm2: {g2} B (coop_gemm1: {k32} B)");
    assert_eq!(g1, COOP64_WORKGROUP_BYTES);
    // gemm2 has no intermediate QDQ (block_amax).
    assert_eq!(g2 + 512, g1);
    assert!(g1 <= 49152, "{g1} B: over the H200's Vulkan limit");
}

/// Specialise `entry` of `m` with `overrides` and run the bounds / loop analysis on it.
fn bounds_report(
    m: &naga::Module,
    i: &naga::valid::ModuleInfo,
    entry: &str,
    overrides: &[(&str, u32)],
) -> shader_bounds::Report {
    let mut consts = naga::back::PipelineConstants::default();
    for (k, v) in overrides {
        consts.insert(k.to_string(), *v as f64);
    }
    let (m, i) = naga::back::pipeline_constants::process_overrides(
        m,
        i,
        Some((naga::ShaderStage::Compute, entry)),
        &consts,
    )
    .unwrap_or_else(|e| panic!("{entry} {overrides:?}: overrides: {e}"));
    let mut a = shader_bounds::Analyzer::new(&m, &i);
    a.entry(entry);
    a.report
}

/// The entry points the backend builds without naga's index clamps and loop bounding
/// (`COOP_TRUSTED_ENTRIES`: the cooperative GEMM's kernels k64, k64p, k64pw; see
/// `coop_runtime_checks`) index every workgroup / private / function array and vector in
/// range, keep every cooperative load and store inside its workgroup array, and end every
/// loop (tests/shader_bounds: interval analysis of the specialised IR), for every weight
/// format, activation format (weight-only and MX), activation, FP4 decode and diagnostic mask,
/// in the one-chunk and the multi-chunk compositions. Fails naming the index, its interval and
/// the array's length. The analysis must also see what it proves (a change that hid the
/// arrays from it would fail here, not pass vacuously).
#[test]
fn coop_trusted_entries_are_in_bounds() {
    use mxmoe::backend::wgpu::COOP_TRUSTED_ENTRIES;
    let sh = Shader::MoeGemmCoop;
    let one = validate(sh.name(), &sh.compose());
    let multi = validate(
        sh.name(),
        &sh.compose_multi().expect("multi-chunk composition"),
    );
    let mut bad = Vec::new();
    let mut runs = 0;
    for entry in COOP_TRUSTED_ENTRIES {
        let mut seen = (0, 0, 0);
        let mut combos: Vec<(bool, Vec<(&str, u32)>)> = Vec::new();
        for w in MxFormat::ALL {
            for a in [
                source::FMT_NONE,
                MxFormat::Fp4E2M1.id(),
                MxFormat::Fp8E4M3.id(),
                MxFormat::Int8.id(),
            ] {
                for act in Activation::ALL {
                    for regs in [0u32, 1] {
                        combos.push((
                            false,
                            vec![
                                ("WEIGHT_FMT", w.id()),
                                ("ACT_FMT", a),
                                ("ACTIVATION", act.id()),
                                ("ROUND_BF16", act.id()),
                                ("COOP_FP4_REGISTERS", regs),
                            ],
                        ));
                    }
                }
            }
            for chunks in [2u32, 4] {
                combos.push((
                    true,
                    vec![
                        ("WEIGHT_FMT", w.id()),
                        ("W_CHUNKS", chunks),
                        ("COOP_FP4_REGISTERS", 1),
                    ],
                ));
            }
        }
        for diag in [2u32, 4, 8] {
            combos.push((false, vec![("COOP_DIAG", diag)]));
        }
        for md in ScaleMode::ALL {
            combos.push((
                false,
                vec![
                    ("ACT_FMT", MxFormat::Fp4E2M1.id()),
                    ("ACT_SCALE_MODE", md.id()),
                ],
            ));
        }
        for (is_multi, ov) in &combos {
            let (m, i) = if *is_multi { &multi } else { &one };
            let r = bounds_report(m, i, entry, ov);
            runs += 1;
            for v in &r.violations {
                bad.push(format!("{entry} {ov:?}: {v}"));
            }
            seen.0 = seen.0.max(r.workgroup_indices());
            seen.1 = seen.1.max(r.coop_extents.len());
            seen.2 = seen.2.max(r.loops.len());
        }
        println!(
            "{entry}: up to {} workgroup indices, {} cooperative extents, {} loops proved",
            seen.0, seen.1, seen.2
        );
        assert!(
            seen.0 >= 10,
            "{entry}: only {} workgroup indices seen",
            seen.0
        );
        // k64p loads A from storage (not counted): its B loads, the zero load, the stores.
        assert!(
            seen.1 >= 7,
            "{entry}: only {} cooperative extents seen",
            seen.1
        );
        assert!(seen.2 >= 3, "{entry}: only {} loops seen", seen.2);
    }
    bad.dedup();
    assert!(
        bad.is_empty(),
        "{} of {runs} specialisations unproved:\n{}",
        bad.len(),
        bad.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// The analysis of `coop_trusted_entries_are_in_bounds` flags what it must: an index one past
/// a workgroup array, an index a guard does not bound, a cooperative load past its array, a
/// loop whose bound the host sets (could wrap), a loop that is not counted; and proves the
/// same code written in range.
#[test]
fn bounds_analysis_flags_out_of_range() {
    let run = |src: &str| -> shader_bounds::Report {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("parse:\n{}", e.emit_to_string(src)));
        let info = Validator::new(
            ValidationFlags::all(),
            Capabilities::SHADER_FLOAT16 | Capabilities::COOPERATIVE_MATRIX,
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("validate:\n{}", e.emit_to_string(src)));
        bounds_report(&module, &info, "main", &[])
    };
    let head = "enable f16; enable wgpu_cooperative_matrix;\n\
                struct P { n: u32 }\n\
                @group(0) @binding(0) var<uniform> p: P;\n\
                @group(0) @binding(1) var<storage, read_write> o: array<u32>;\n\
                var<workgroup> a: array<u32, 64>;\n\
                var<workgroup> b: array<u32, 2>;\n\
                var<workgroup> h: array<f16, 256>;\n\
                @compute @workgroup_size(64)\n\
                fn main(@builtin(local_invocation_index) lid: u32) {\n";
    let case = |body: &str| run(&format!("{head}{body}\n}}\n"));
    // In range: the index, the guarded index, a counted loop, a 16x16 load at the end; a
    // loop bound the host sets, step 1 (cannot wrap).
    let ok = case(
        "a[lid] = 1u;\n\
         if lid < 2u { b[lid] = 0u; }\n\
         for (var i = 0u; i < 4u; i = i + 1u) { o[i] = a[lid / 4u + 16u * i]; }\n\
         let m = coopLoad<coop_mat16x16<f16, A>>(&h[0], 16u);\n\
         coopStore(m, &h[0], 16u);\n\
         for (var j = 0u; j < p.n; j = j + 1u) { o[j] = 0u; }",
    );
    assert!(ok.violations.is_empty(), "{:?}", ok.violations);
    assert_eq!(ok.workgroup_indices(), 3, "{ok:?}");
    assert_eq!((ok.coop_extents.len(), ok.loops.len()), (2, 2), "{ok:?}");
    for (body, what) in [
        ("a[lid + 1u] = 1u;", "one past the array"),
        (
            "if lid < 3u { b[lid] = 0u; }",
            "a guard that does not bound",
        ),
        ("b[lid % 3u] = 0u;", "a modulus one too large"),
        (
            "let m = coopLoad<coop_mat16x16<f16, A>>(&h[1], 16u);",
            "a cooperative load one past",
        ),
        (
            "let m = coopLoad<coop_mat16x16<f16, A>>(&h[0], 17u);",
            "a cooperative stride too large",
        ),
        (
            "for (var i = 0u; i < p.n; i = i + 2u) { o[i] = 0u; }",
            "a loop bound the host sets (i + 2 may wrap)",
        ),
        (
            "var i = 0u; loop { if o[i] == 0u { break; } i = i + 1u; }",
            "a loop that is not counted",
        ),
        (
            "for (var i = 0u; i < 64u; i = i + 1u) { if i > 8u { o[i] = a[i + 1u]; } }",
            "an index past the array in a loop",
        ),
    ] {
        let r = case(body);
        assert!(!r.violations.is_empty(), "{what}: not flagged ({r:?})");
    }
}
