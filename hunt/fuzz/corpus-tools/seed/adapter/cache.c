/* the tool fuzzer's seed cache: never compiled */
int seed_cache;
