//! Kernel source file names and API call names by number: an op's site holds 4 bytes
//! for each instead of a 16-byte string slice (a program at large P has millions of
//! sites).

use std::cell::RefCell;
use std::sync::Mutex;

/// Every file name numbered so far, by number.
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's numbers by the name's address and length: a kernel's ops come from
    /// a few files, so a short list answers without the lock.
    static SEEN: RefCell<Vec<(usize, usize, u32)>> = const { RefCell::new(Vec::new()) };
}

/// The number of file name `name` (the same for equal names).
pub fn number(name: &'static str) -> u32 {
    let key = (name.as_ptr() as usize, name.len());
    SEEN.with(|seen| {
        if let Some(&(_, _, n)) = seen.borrow().iter().find(|s| (s.0, s.1) == key) {
            return n;
        }
        let n = {
            let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
            match names.iter().position(|&x| x == name) {
                Some(i) => i,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            }
        };
        let n = u32::try_from(n).expect("fewer than 2^32 source files");
        seen.borrow_mut().push((key.0, key.1, n));
        n
    })
}

/// The file name numbered `n`.
pub fn name(n: u32) -> &'static str {
    NAMES.lock().unwrap_or_else(|e| e.into_inner())[n as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_share_a_number() {
        let a: &'static str = Box::leak(String::from("k.py").into_boxed_str());
        let b: &'static str = Box::leak(String::from("k.py").into_boxed_str());
        assert_eq!(number(a), number(b));
        assert_ne!(number("other.py"), number(a));
        assert_eq!(name(number(a)), "k.py");
    }
}
