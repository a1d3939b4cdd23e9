//! Name encryption: decrypting arbitrary text never panics, and encrypting arbitrary bytes
//! (as a name and as a path) always decrypts back to them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapdeck_anon::NameCipher;

fuzz_target!(|data: &[u8]| {
    let cipher = NameCipher::new(&[0x5a; 64]);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = cipher.decrypt(text);
        let _ = cipher.decrypt_path(text);
        // Also with the marker, so the fuzzer reaches base64 and SIV quickly.
        let _ = cipher.decrypt(&format!("~{text}"));
    }
    let enc = cipher.encrypt(data);
    assert!(NameCipher::is_encrypted(&enc));
    assert_eq!(cipher.decrypt(&enc).expect("own ciphertext"), data);
    let path = cipher.encrypt_path(data);
    assert_eq!(cipher.decrypt_path(&path).expect("own path"), data);
});
