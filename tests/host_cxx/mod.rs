//! The host C++ compiler for the tests that build the CPU emulations of the HIP kernels
//! (`hip/test/*.cpp`): the first clang++ found, newest Debian names first after clang-19 (the
//! HIP build's). Shared by tests/backend_ops.rs and src/backend/hip/kernels/tests.rs (through
//! `#[path]`), as scripts/hip_emu.sh does the same search in shell.

/// The clang++ to run; panics with the package to install when there is none.
pub fn host_cxx() -> &'static str {
    [
        "clang++-19",
        "clang++-20",
        "clang++-21",
        "clang++-22",
        "clang++",
    ]
    .into_iter()
    .find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .expect("no clang++ found (apt-get install clang-19; scripts/test.sh installs it)")
}
