//! MoE quantization schemes: (weight format, activation format).
//!
//! The five OCP MX MoE schemes of AMD Quark as run by vLLM (NUMERICS.md 10.1,
//! `vllm/.../ocp_mx_utils.py::OCP_MX_Scheme`), the weight-only ones (gpt-oss style: activations
//! stay f32/bf16) and the MXFP8 pairs as an extension.

use crate::format::MxFormat;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scheme {
    /// Format of the expert weights.
    pub weight: MxFormat,
    /// Format of the activation QDQ at both QDQ points, or `None` for weight-only schemes.
    pub activation: Option<MxFormat>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown scheme '{0}' (expected one of: {list})", list = Scheme::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownScheme(pub String);

impl Scheme {
    pub const fn new(weight: MxFormat, activation: Option<MxFormat>) -> Self {
        Scheme { weight, activation }
    }

    /// The five OCP MX MoE schemes, in vLLM's order.
    pub const OCP_MX: [Scheme; 5] = [
        Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp4E2M1)),
        Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp6E3M2)),
        Scheme::new(MxFormat::Fp4E2M1, Some(MxFormat::Fp6E2M3)),
        Scheme::new(MxFormat::Fp6E3M2, Some(MxFormat::Fp6E3M2)),
        Scheme::new(MxFormat::Fp6E2M3, Some(MxFormat::Fp6E2M3)),
    ];

    /// Every scheme we know by name.
    pub const ALL: [Scheme; 12] = [
        Scheme::OCP_MX[0],
        Scheme::OCP_MX[1],
        Scheme::OCP_MX[2],
        Scheme::OCP_MX[3],
        Scheme::OCP_MX[4],
        Scheme::new(MxFormat::Fp4E2M1, None),
        Scheme::new(MxFormat::Fp6E3M2, None),
        Scheme::new(MxFormat::Fp6E2M3, None),
        Scheme::new(MxFormat::Fp8E4M3, Some(MxFormat::Fp8E4M3)),
        Scheme::new(MxFormat::Fp8E5M2, Some(MxFormat::Fp8E5M2)),
        Scheme::new(MxFormat::Fp8E4M3, None),
        Scheme::new(MxFormat::Fp8E5M2, None),
    ];

    /// The canonical name, e.g. `w_mxfp4_a_mxfp6_e3m2` or `w_mxfp4` (weight-only).
    pub fn name(&self) -> String {
        match self.activation {
            Some(a) => format!("w_{}_a_{}", self.weight.name(), a.name()),
            None => format!("w_{}", self.weight.name()),
        }
    }

    pub fn is_weight_only(&self) -> bool {
        self.activation.is_none()
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Scheme {
    type Err = UnknownScheme;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        Scheme::ALL
            .iter()
            .find(|sc| sc.name() == t)
            .copied()
            .ok_or_else(|| UnknownScheme(s.to_string()))
    }
}
