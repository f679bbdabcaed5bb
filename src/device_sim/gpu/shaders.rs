//! The WGSL sources as modules get them: the constants of `codes.rs`, then
//! `shaders/common.wgsl` (parameter blocks, the reduction rule, grid strides, element
//! types: 16-bit packing, widening and narrowing, f32 orders), then the kernel (WGSL has
//! no #include).

use super::codes::wgsl_consts;

/// `shaders/common.wgsl`: the parameter block, the reduction rule, the grid stride.
pub const COMMON_WGSL: &str = include_str!("../../../shaders/common.wgsl");

/// Every kernel, by file name, as written (without the prelude).
pub const SHADERS: &[(&str, &str)] = &[
    (
        "accumulate.wgsl",
        include_str!("../../../shaders/accumulate.wgsl"),
    ),
    (
        "accumulate_vec4.wgsl",
        include_str!("../../../shaders/accumulate_vec4.wgsl"),
    ),
    (
        "accumulate_batch.wgsl",
        include_str!("../../../shaders/accumulate_batch.wgsl"),
    ),
    ("fill.wgsl", include_str!("../../../shaders/fill.wgsl")),
    (
        "schedule.wgsl",
        include_str!("../../../shaders/schedule.wgsl"),
    ),
    ("halves.wgsl", include_str!("../../../shaders/halves.wgsl")),
    (
        "compute_elementwise.wgsl",
        include_str!("../../../shaders/compute_elementwise.wgsl"),
    ),
    (
        "compute_layout.wgsl",
        include_str!("../../../shaders/compute_layout.wgsl"),
    ),
    (
        "compute_math.wgsl",
        include_str!("../../../shaders/compute_math.wgsl"),
    ),
    (
        "compute_reduce.wgsl",
        include_str!("../../../shaders/compute_reduce.wgsl"),
    ),
    (
        "compute_matmul.wgsl",
        include_str!("../../../shaders/compute_matmul.wgsl"),
    ),
];

/// Kernels that extend another: `compute_math.wgsl` is appended to
/// `compute_elementwise.wgsl` (its bindings, loads and packing), a module of its own so
/// that the exact ops' pipelines compile without the transcendentals.
const EXTENDS: &[(&str, &str)] = &[("compute_math.wgsl", "compute_elementwise.wgsl")];

fn source(name: &str) -> &'static str {
    SHADERS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no shader named {name}"))
        .1
}

/// The module source of kernel `name` (a file name in [`SHADERS`]): constants, common
/// part, the kernel it extends (if any), kernel.
///
/// # Panics
/// When `name` is not in [`SHADERS`].
pub fn assembled(name: &str) -> String {
    let kernel = source(name);
    let base = EXTENDS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, b)| source(b));
    format!("{}\n{COMMON_WGSL}\n{base}\n{kernel}", wgsl_consts())
}
