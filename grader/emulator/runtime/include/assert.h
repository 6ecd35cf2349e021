// The emulator's assert(): a failed device assertion ends the launch with a
// message (like the GPU's "device-side assert triggered"), not the process.
// No include guard, like the standard header: NDEBUG is honoured per include.
extern "C" void __emu_trap(const char* why, const char* file, int line) __attribute__((noreturn));
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : __emu_trap("assertion failed: " #e, __FILE__, __LINE__))
#endif
