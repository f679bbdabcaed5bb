//! Host arrays as the bytes of one message (a partitioned run's outputs, sent to every
//! rank): per device its operands, each its dtype, shape and words.

use crate::array::{DType, HostArray};
use crate::error::{Error, Result};

fn put(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}

/// `arrays[device][operand]` as bytes.
pub fn encode(arrays: &[Vec<HostArray>]) -> Vec<u8> {
    let mut out = Vec::new();
    put(&mut out, arrays.len() as u64);
    for dev in arrays {
        put(&mut out, dev.len() as u64);
        for a in dev {
            let code = DType::ALL.iter().position(|&d| d == a.dtype).unwrap_or(0);
            put(&mut out, code as u64);
            put(&mut out, a.shape.len() as u64);
            for &d in &a.shape {
                put(&mut out, d as u64);
            }
            put(&mut out, a.words.len() as u64);
            out.extend_from_slice(bytemuck::cast_slice(&a.words));
        }
    }
    out
}

/// [`encode`]'s arrays back.
pub fn decode(bytes: &[u8]) -> Result<Vec<Vec<HostArray>>> {
    let bad = || Error::bad_input("a message of arrays from another rank is malformed");
    let mut cursor = Cursor { bytes, at: 0 };
    let devices = cursor.u64()? as usize;
    let mut out = Vec::with_capacity(devices.min(1 << 20));
    for _ in 0..devices {
        let n = cursor.u64()? as usize;
        let mut dev = Vec::with_capacity(n.min(1 << 10));
        for _ in 0..n {
            let dtype = *DType::ALL.get(cursor.u64()? as usize).ok_or_else(bad)?;
            let ndim = cursor.u64()? as usize;
            let shape = (0..ndim)
                .map(|_| cursor.u64().map(|d| d as usize))
                .collect::<Result<Vec<_>>>()?;
            let words = cursor.u64()? as usize;
            let raw = cursor.take(words.checked_mul(4).ok_or_else(bad)?)?;
            dev.push(HostArray {
                dtype,
                shape,
                words: bytemuck::pod_collect_to_vec(raw),
            });
        }
        out.push(dev);
    }
    Ok(out)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            Error::bad_input("a message of arrays from another rank is malformed")
        })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_survive_the_round_trip() {
        let a = HostArray::from_i32(&[2], vec![1, -2]).unwrap();
        let arrays = vec![vec![a.clone()], vec![], vec![a.clone(), a]];
        assert_eq!(decode(&encode(&arrays)).unwrap(), arrays);
        assert!(decode(&encode(&arrays)[..20]).is_err());
    }
}
