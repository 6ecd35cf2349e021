def blocks_per_sm(regs_per_thread, smem_per_block, threads_per_block):
    raise NotImplementedError
