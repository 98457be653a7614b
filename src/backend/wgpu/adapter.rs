//! The adapters wgpu can see: instances, the ranking that picks one, their summaries for
//! `mxmoe info`, and whether one offers the cooperative-matrix configuration the GEMM needs.

/// One adapter as `mxmoe info` lists it.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// The features mxmoe uses that this adapter has (SHADER_F16, SUBGROUP, TIMESTAMP_QUERY).
    pub features: Vec<&'static str>,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
    /// Whether this adapter can run compute shaders at all (GL adapters may not).
    pub compute: bool,
    /// The cooperative-matrix configurations the adapter reports (M x N x K, A/B type ->
    /// accumulator type), when it offers `EXPERIMENTAL_COOPERATIVE_MATRIX`.
    pub coop_matrix: Vec<String>,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}, driver {} {}); features [{}]; max storage binding {} MiB, max buffer {} MiB, \
             {} storage buffers/stage, {} B workgroup memory, {} invocations/workgroup{}{}",
            self.name,
            self.backend,
            self.device_type,
            self.driver,
            self.driver_info,
            self.features.join(", "),
            self.max_storage_buffer_binding_size >> 20,
            self.max_buffer_size >> 20,
            self.max_storage_buffers_per_shader_stage,
            self.max_compute_workgroup_storage_size,
            self.max_compute_invocations_per_workgroup,
            if self.coop_matrix.is_empty() {
                String::new()
            } else {
                format!("; cooperative matrices [{}]", self.coop_matrix.join(", "))
            },
            if self.compute { "" } else { "; NO COMPUTE" }
        )
    }
}

pub(super) const WANTED: [(wgpu::Features, &str); 3] = [
    (wgpu::Features::SHADER_F16, "SHADER_F16"),
    (wgpu::Features::SUBGROUP, "SUBGROUP"),
    (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
];

pub(super) fn summarize(a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    let l = a.limits();
    let feats = a.features();
    AdapterSummary {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: info.driver.clone(),
        driver_info: info.driver_info.clone(),
        features: WANTED
            .iter()
            .filter(|(f, _)| feats.contains(*f))
            .map(|(_, n)| *n)
            .collect(),
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_buffer_size: l.max_buffer_size,
        max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        compute: a
            .get_downlevel_capabilities()
            .flags
            .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS),
        coop_matrix: if feats.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            a.cooperative_matrix_properties()
                .iter()
                .map(|p| {
                    format!(
                        "{}x{}x{} {:?}->{:?}{}",
                        p.m_size,
                        p.n_size,
                        p.k_size,
                        p.ab_type,
                        p.cr_type,
                        if p.saturating_accumulation {
                            " sat"
                        } else {
                            ""
                        }
                    )
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// Whether `p` is the configuration shaders/moe_gemm_coop.wgsl uses: 16x16x16, f16 operands,
/// f32 accumulator.
pub(super) fn coop_config_ok(p: &wgpu::CooperativeMatrixProperties) -> bool {
    (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
        && p.ab_type == wgpu::CooperativeScalarType::F16
        && p.cr_type == wgpu::CooperativeScalarType::F32
}

/// The adapter features the cooperative-matrix GEMM needs (with a [`coop_config_ok`]
/// configuration and subgroups of 32 consecutive invocations).
pub(super) const COOP_FEATURES: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);

/// An instance over `backends` (`WGPU_BACKEND`, e.g. "vulkan" or "gl", overrides them; the other
/// WGPU_* variables are honoured too).
pub(super) fn instance_for(backends: wgpu::Backends) -> wgpu::Instance {
    let mut d = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    d.backends = wgpu::Backends::from_env().unwrap_or(backends);
    wgpu::Instance::new(d)
}

pub(super) fn instance() -> wgpu::Instance {
    instance_for(wgpu::Backends::all())
}

pub(super) fn all_adapters(inst: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all());
    pollster::block_on(inst.enumerate_adapters(backends))
}

/// Every adapter wgpu can see (honouring `WGPU_BACKEND`), best first, for `mxmoe info`.
pub fn enumerate_adapters() -> Vec<AdapterSummary> {
    let inst = instance();
    let mut v = all_adapters(&inst);
    v.sort_by_key(rank);
    v.iter().map(summarize).collect()
}

/// Lower is better: discrete > integrated > virtual > CPU > other; Vulkan/Metal/DX12 before GL.
pub(super) fn rank(a: &wgpu::Adapter) -> (u32, u32) {
    let info = a.get_info();
    let t = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let b = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::Gl => 2,
        _ => 1,
    };
    let compute = a
        .get_downlevel_capabilities()
        .flags
        .contains(wgpu::DownlevelFlags::COMPUTE_SHADERS);
    (if compute { 0 } else { 100 } + t, b)
}
