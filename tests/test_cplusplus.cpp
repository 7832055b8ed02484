/* SPDX-License-Identifier: MIT */
// The public header in a C++ program: extern "C" linkage, the typed calls,
// and coexistence with code that defines the driver's types itself.
#include "pinstage.h"

#include <cstdio>
#include <cstring>
#include <vector>

// What cuda.h declares for these types; a redefinition must be identical.
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

int main() {
    if (pinstage_version_number() != PINSTAGE_VERSION_NUMBER) return 1;
    if (std::strcmp(pinstage_status_name(PINSTAGE_ERROR_INVALID_VALUE), "CUDA_ERROR_INVALID_VALUE") != 0)
        return 1;
    if (pinstage_context_init(0) != PINSTAGE_SUCCESS) {
        std::fprintf(stderr, "context: %s\n", pinstage_last_error_message());
        return 1;
    }
    pinstage_buffer *buf = nullptr;
    pinstage_devbuf *d = nullptr;
    std::vector<float> src(1000), back(1000);
    for (size_t i = 0; i < src.size(); i++) src[i] = float(i) * 0.25f;
    if (pinstage_buffer_create(&buf) || pinstage_devbuf_alloc_f32(&d, src.size())) return 1;
    if (pinstage_buffer_upload_f32(buf, d, src.data(), src.size(), nullptr)) return 1;
    if (pinstage_buffer_download_f32(buf, back.data(), back.size(), d, nullptr)) return 1;
    int ok = src == back;
    pinstage_devbuf_free(d);
    pinstage_buffer_free(buf);
    pinstage_context_release(0);
    std::printf("%s\n", ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}
