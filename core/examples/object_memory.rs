//! Heap bytes per stored object: applies N creates of steward-bench's object (a `data` string of
//! SIZE bytes in the spec, 256 by default; with `labelled`, one label on every other object) and
//! prints what the state holds per object, as asked of the allocator (the size classes of the
//! allocator the server runs on round each allocation up).
//!
//!   cargo run --release -p steward-core --example object_memory [N] [labelled|plain] [SIZE]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use steward_core::apply::apply;
use steward_core::command::{Command, ObjectCommand};
use steward_core::effects::ApplyContext;
use steward_core::objects::resource::Resource;
use steward_core::state::State;

struct Counting;
/// Bytes asked for and not yet freed.
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The same, each allocation rounded up to jemalloc's size class (what the server runs on).
static CLASSES: AtomicIsize = AtomicIsize::new(0);

/// jemalloc's size class for `size` (4 KiB pages, 16-byte quantum): 8, 16, then multiples of 16
/// up to 128, then four classes per doubling (160, 192, 224, 256, 320, ...).
fn class(size: usize) -> isize {
    let class = match size {
        0..=8 => 8,
        9..=128 => size.div_ceil(16) * 16,
        _ => {
            let step = 1 << ((size - 1).ilog2() - 2);
            size.div_ceil(step) * step
        }
    };
    class as isize
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        CLASSES.fetch_add(class(layout.size()), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        CLASSES.fetch_sub(class(layout.size()), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        CLASSES.fetch_add(class(new) - class(layout.size()), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() -> Result<(), String> {
    let arg = |i: usize, default: u64| match std::env::args().nth(i) {
        Some(a) => a
            .parse::<u64>()
            .map_err(|e| format!("argument {i} ({a}): {e}")),
        None => Ok(default),
    };
    let n = arg(1, 100_000)?.max(1);
    let labelled = std::env::args().nth(2).is_some_and(|a| a == "labelled");
    println!(
        "size_of Resource {} ObjectMeta {} ObjectKey {}",
        std::mem::size_of::<Resource>(),
        std::mem::size_of::<steward_core::objects::resource::ObjectMeta>(),
        std::mem::size_of::<steward_core::objects::resource::ObjectKey>()
    );
    let mut state = State::new();
    let mut events = Vec::new();
    let size = usize::try_from(arg(3, 256)?).map_err(|e| e.to_string())?;
    let data = "x".repeat(size);
    let start = LIVE.load(Ordering::Relaxed);
    let start_classes = CLASSES.load(Ordering::Relaxed);
    let mut parsed = 0isize;
    for i in 0..n {
        let labels = if labelled && i % 2 == 0 {
            r#","labels":{"bench":"list"}"#
        } else {
            ""
        };
        let text = format!(
            r#"{{"kind":"Director","apiVersion":"steward.dev/v1","metadata":{{"name":"c-{i}","namespace":"bench"{labels}}},"spec":{{"data":"{data}"}}}}"#
        );
        let before = LIVE.load(Ordering::Relaxed);
        let object = Resource::from_json(&text).map_err(|e| format!("{e:?}"))?;
        parsed += LIVE.load(Ordering::Relaxed) - before;
        let ctx = ApplyContext {
            log_index: i + 1,
            term: 2,
            time_ms: 1_000 + i,
            stamped: true,
            wall_ms: None,
        };
        let cmd = Command::Objects(ObjectCommand::Create {
            object,
            fence: None,
        });
        apply(&mut state, &ctx, &cmd, &mut events);
        events.clear();
    }
    let held = LIVE.load(Ordering::Relaxed) - start;
    let classes = CLASSES.load(Ordering::Relaxed) - start_classes;
    let per = |bytes: isize| bytes / n as isize;
    println!(
        "{n} objects: {:.1} MiB held, {} bytes per object ({} in jemalloc's size classes); \
         a parsed object {} bytes",
        held as f64 / (1 << 20) as f64,
        per(held),
        per(classes),
        per(parsed)
    );
    Ok(())
}
