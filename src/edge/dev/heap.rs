//! The wasm heap this module uses, counted at its allocator, for `/stats` (`wasmHeap`): with
//! it, the memory a live stream costs the project itself can be told apart from what the
//! runtime spends on the object around it (see BENCHMARKS.md, "Memory"). Only a build with the
//! `heap-stats` feature (the dev build the benchmarks serve) installs it: it is the global
//! allocator, and costs a counter update per allocation.

mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The system allocator (dlmalloc on wasm32), counting the bytes it has handed out.
    pub struct Counting;

    pub static IN_USE: AtomicUsize = AtomicUsize::new(0);

    // SAFETY: every call is forwarded to `System` unchanged; only a counter is added.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) };
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
                IN_USE.fetch_add(new_size, Ordering::Relaxed);
            }
            p
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;
}

/// What the wasm heap holds now, for every object of this isolate together: the bytes in use
/// (allocated and not freed) and the linear memory reserved (it only grows).
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmHeap {
    pub in_use_bytes: usize,
    pub memory_bytes: usize,
}

pub fn wasm_heap() -> WasmHeap {
    use wasm_bindgen::JsCast;
    let memory_bytes = wasm_bindgen::memory()
        .unchecked_into::<js_sys::WebAssembly::Memory>()
        .buffer()
        .unchecked_into::<js_sys::ArrayBuffer>()
        .byte_length() as usize;
    WasmHeap { in_use_bytes: counting::IN_USE.load(std::sync::atomic::Ordering::Relaxed), memory_bytes }
}
