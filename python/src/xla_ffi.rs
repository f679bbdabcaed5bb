//! The slice of XLA's typed FFI (`xla/ffi/api/c_api.h`, as jaxlib 0.12 ships it) that
//! tpusim's custom call uses: the call frame's buffers, errors and the metadata query.
//! Each struct mirrors the header up to the last field read here.

use std::ffi::{c_char, c_void, CString};
use std::ptr::null_mut;

#[repr(C)]
pub struct Extension {
    struct_size: usize,
    pub kind: i32,
    next: *mut Extension,
}

#[repr(C)]
pub struct ApiVersion {
    struct_size: usize,
    extension_start: *mut Extension,
    major: i32,
    minor: i32,
}

#[repr(C)]
pub struct Metadata {
    struct_size: usize,
    api_version: ApiVersion,
    traits: u32,
    state_type_id: i64,
}

#[repr(C)]
pub struct MetadataExtension {
    base: Extension,
    metadata: *mut Metadata,
}

#[repr(C)]
pub struct Buffer {
    struct_size: usize,
    extension_start: *mut Extension,
    pub dtype: i32,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *const i64,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` (the same layout).
#[repr(C)]
pub struct Buffers {
    struct_size: usize,
    extension_start: *mut Extension,
    pub size: i64,
    types: *const i32,
    pub items: *const *mut Buffer,
}

#[repr(C)]
struct Attrs {
    struct_size: usize,
    extension_start: *mut Extension,
    size: i64,
    types: *const i32,
    names: *const c_void,
    attrs: *const c_void,
}

#[repr(C)]
pub struct CallFrame {
    struct_size: usize,
    pub extension_start: *mut Extension,
    pub api: *const Api,
    ctx: *mut c_void,
    pub stage: i32,
    pub args: Buffers,
    pub rets: Buffers,
    attrs: Attrs,
}

#[repr(C)]
struct ErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut Extension,
    message: *const c_char,
    errc: i32,
}

type Fn1<A> = unsafe extern "C" fn(*mut A) -> *mut c_void;

#[repr(C)]
pub struct Api {
    struct_size: usize,
    extension_start: *mut Extension,
    api_version: ApiVersion,
    internal_api: *const c_void,
    error_create: Fn1<ErrorCreateArgs>,
}

/// The header's `XLA_FFI_API_MAJOR`/`MINOR` (jaxlib 0.12) and constants used here.
const API_MAJOR: i32 = 0;
const API_MINOR: i32 = 5;
pub const EXTENSION_METADATA: i32 = 1;
pub const STAGE_EXECUTE: i32 = 3;
const ERROR_INTERNAL: i32 = 13;
pub const DTYPE_S32: i32 = 4;

/// Bytes per element of an XLA primitive type, for the types a pallas operand can have.
pub fn element_bytes(dtype: i32) -> Option<usize> {
    Some(match dtype {
        1 | 2 | 6 => 1,       // pred, s8, u8
        3 | 7 | 10 | 16 => 2, // s16, u16, f16, bf16
        4 | 8 | 11 => 4,      // s32, u32, f32
        5 | 9 | 12 | 15 => 8, // s64, u64, f64, c64
        18 => 16,             // c128
        _ => return None,
    })
}

/// The struct size the header's `XLA_FFI_DEFINE_STRUCT_TRAITS` gives: up to the end of
/// its last field.
macro_rules! size_to {
    ($t:ty, $field:ident, $ft:ty) => {
        std::mem::offset_of!($t, $field) + std::mem::size_of::<$ft>()
    };
}

/// A new error with `message` (owned by whoever it is handed to).
///
/// # Safety
/// `api` is the API of a live call frame.
pub unsafe fn error(api: *const Api, message: &str) -> *mut c_void {
    let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = ErrorCreateArgs {
        struct_size: size_to!(ErrorCreateArgs, errc, i32),
        extension_start: null_mut(),
        message: msg.as_ptr(),
        errc: ERROR_INTERNAL,
    };
    ((*api).error_create)(&mut args)
}

/// Answers XLA's metadata query (the API version this handler was built for) when
/// `frame` is one; true if it was.
///
/// # Safety
/// `frame` is XLA's call frame.
pub unsafe fn answer_metadata(frame: &CallFrame) -> bool {
    let ext = frame.extension_start;
    if ext.is_null() || (*ext).kind != EXTENSION_METADATA {
        return false;
    }
    let m = &mut *(*(ext as *mut MetadataExtension)).metadata;
    m.api_version = ApiVersion {
        struct_size: std::mem::size_of::<ApiVersion>(),
        extension_start: null_mut(),
        major: API_MAJOR,
        minor: API_MINOR,
    };
    m.traits = 0;
    m.state_type_id = 0;
    true
}
