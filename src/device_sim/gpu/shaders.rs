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

/// Function libraries (no bindings, no entry points) that kernels are assembled with.
pub const PARTS: &[(&str, &str)] = &[
    (
        "elementwise_ops.wgsl",
        include_str!("../../../shaders/elementwise_ops.wgsl"),
    ),
    (
        "math_ops.wgsl",
        include_str!("../../../shaders/math_ops.wgsl"),
    ),
];

/// What each kernel is assembled from before its own text, in order: the elementwise
/// kernels take the function libraries, and `compute_math.wgsl` extends
/// `compute_elementwise.wgsl` (its bindings, loads and packing), a module of its own so
/// that the exact ops' pipelines compile without the transcendentals.
const BEFORE: &[(&str, &[&str])] = &[
    ("compute_elementwise.wgsl", &["elementwise_ops.wgsl"]),
    (
        "compute_math.wgsl",
        &[
            "elementwise_ops.wgsl",
            "compute_elementwise.wgsl",
            "math_ops.wgsl",
        ],
    ),
];

fn source(name: &str) -> &'static str {
    SHADERS
        .iter()
        .chain(PARTS)
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no shader named {name}"))
        .1
}

/// The module source of kernel `name` (a file name in [`SHADERS`]): constants, common
/// part, the parts it is assembled from (if any), kernel.
///
/// # Panics
/// When `name` is not in [`SHADERS`].
pub fn assembled(name: &str) -> String {
    let before = BEFORE
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(&[][..], |(_, b)| *b);
    let parts: Vec<&str> = before.iter().map(|p| source(p)).collect();
    with_prelude(&parts.join("\n"), source(name))
}

/// A module: the constants, the common part, `libraries`, then `kernel`.
pub fn with_prelude(libraries: &str, kernel: &str) -> String {
    format!("{}\n{COMMON_WGSL}\n{libraries}\n{kernel}", wgsl_consts())
}

/// The function libraries of a fused region's generated kernel (every elementwise
/// function, the transcendentals included).
pub fn region_libraries() -> String {
    ["elementwise_ops.wgsl", "math_ops.wgsl"]
        .iter()
        .map(|p| source(p))
        .collect::<Vec<_>>()
        .join("\n")
}
