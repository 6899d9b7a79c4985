/* cffi declarations of engine/csrc/xc_ext.h (the io helpers and the
 * zero-copy name block, in every build); contracts are in that header.
 * Declared after _cdef.h, whose types they use. */

int xc_io_read_full(const xc_io *io, int64_t handle, const char *path,
                    void *buf, size_t len, uint64_t offset, size_t *got);
size_t xc_io_aligned_span(uint64_t offset, size_t len, size_t align);
int xc_io_read_aligned(const xc_io *io, int64_t handle, const char *path,
                       void *buf, size_t buf_len, uint64_t offset,
                       size_t len, size_t align, size_t *payload_start);
int xc_io_open_probed(const xc_io *io, const char *path, int want_direct,
                      int64_t *handle, int *direct_active, char *note,
                      size_t note_len);

const char *xc_st_names_block(const xc_st *st, size_t *len);
