// Matrix transpose through shared memory: out = in^T, where in has `rows` rows
// and `cols` columns and out has `cols` rows and `rows` columns (row-major).
// A block of 32 x 32 threads moves one 32 x 32 tile: thread (tx, ty) reads
// in[y0 + ty][x0 + tx] (a warp reads 32 consecutive floats of a row of in:
// coalesced) into tile[ty][tx]; after the barrier it writes tile[tx][ty] to
// out[x0 + ty][y0 + tx] (a warp writes 32 consecutive floats of a row of out:
// coalesced). The warp's read of tile[tx][ty] walks down a column of the tile:
// with [32][32] its 32 words are 32 floats apart, all in one bank (a 32-way
// conflict); one float of padding per row ([32][33]) puts them 33 floats
// apart, in 32 different banks.
#define TILE_DIM 32

__global__ void transpose(int rows, int cols, const float* in, float* out)
{
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * TILE_DIM;        // first column of in in this tile
    const int y0 = blockIdx.y * TILE_DIM;        // first row of in in this tile

    if (y0 + ty < rows && x0 + tx < cols)
        tile[ty][tx] = in[(y0 + ty) * cols + x0 + tx];
    __syncthreads();
    if (x0 + ty < cols && y0 + tx < rows)
        out[(x0 + ty) * rows + y0 + tx] = tile[ty][tx];
}
