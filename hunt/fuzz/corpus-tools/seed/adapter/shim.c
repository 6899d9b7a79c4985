/* the tool fuzzer's seed shim: never compiled */
