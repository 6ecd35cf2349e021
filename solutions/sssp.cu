// Single-source shortest paths on the grid graph of C (M x N, C >= 0): one
// vertex per cell, edges between 4-neighbours, entering cell v costs C[v] (the
// edge u -> v weighs C[v]; the source's own cost is not counted: dist = 0
// there). Two kernels: sssp_relax (the distances) and sssp_path (one path).
//
// Why block-local relaxation (tiles in shared memory, iterated to convergence,
// between global sweeps)? Plain Bellman-Ford sweeps over the whole grid (one
// launch relaxes every cell once from its neighbours) move the frontier one
// cell per sweep: a shortest path of L cells needs L sweeps, about M + N for
// A, B uniform in [0, 1) (C is nearly constant, so paths are nearly monotone
// staircases), each touching all M N cells: (M + N) M N relaxations, 8192
// launches of 16.8 M cells at 4096 x 4096. Here a block loads its 32 x 32 tile
// of dist (plus a one-cell halo of the neighbour tiles) into shared memory and
// relaxes it (Jacobi: read, __syncthreads(), write, __syncthreads_or) until
// nothing in the tile changes: the frontier crosses a whole tile per launch, so
// about (M + N) / 32 + a few launches (256 + a few at 4096 x 4096), and each
// tile iterates about 64 times per visit (the paths inside it).
// Tiles far from the frontier do nothing: tile t is visited in round r only
// if it or one of its 4 neighbour tiles changed in round r - 1 or r
// (stamp[t] = the last round in which tile t changed; -1 = never), so the work
// per round is the frontier band of tiles, not the whole grid.
// Blocks update dist in place: a halo read races with the neighbour tile's
// writes, which is harmless here (4-byte floats, values only ever decrease,
// every value is the length of a real path). A round in which no tile changes
// is a fixed point (nobody wrote, so every tile relaxed against final halos).
// Host: dist = +inf except 0 at the source, stamp = -1 except 0 at the source's
// tile, then round = 1, 2, ... : launch, read the 4-byte *last_round; stop at
// the first round that did not write it.
//
// sssp_path walks from target back to source with one warp: lanes 0..3 read
// the 4 neighbours' distances, shuffles find the smallest (ties to the smaller
// index), and that neighbour u is a predecessor: dist[v] = fl(dist[u*] + C[v])
// for the true predecessor u*, and the smallest neighbour has dist[u] <= that,
// so dist[u] + C[v] rounds to dist[v] too (C > 0 makes the walk strictly
// descend). Then the warp reverses the path in place (source first).
// Launch: sssp_relax with (TILE, TILE) threads, grid (ceil(N/TILE), ceil(M/TILE));
// sssp_path with one block of 32 threads.
#ifndef TILE
#define TILE 32
#endif

__global__ void sssp_relax(int M, int N, const float* C, float* dist, int* stamp, int round, int* last_round)
{
    __shared__ float d[TILE + 2][TILE + 2];
    __shared__ float c[TILE][TILE];
    const int tilesX = gridDim.x, tilesY = gridDim.y;
    const int bx = blockIdx.x, by = blockIdx.y;

    // Visit this tile only when it or a 4-neighbour tile changed last round (or this one).
    int recent = stamp[by * tilesX + bx];
    if (bx > 0) recent = max(recent, stamp[by * tilesX + bx - 1]);
    if (bx + 1 < tilesX) recent = max(recent, stamp[by * tilesX + bx + 1]);
    if (by > 0) recent = max(recent, stamp[(by - 1) * tilesX + bx]);
    if (by + 1 < tilesY) recent = max(recent, stamp[(by + 1) * tilesX + bx]);
    if (recent < round - 1)
        return;                        // the same decision for every thread of the block

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = by * TILE + ty, col = bx * TILE + tx;
    const bool inside = row < M && col < N;
    const float INF = __int_as_float(0x7f800000);

    // Load the tile, its costs and the one-cell halo (+inf outside C).
    d[ty + 1][tx + 1] = inside ? dist[row * N + col] : INF;
    c[ty][tx] = inside ? C[row * N + col] : INF;
    if (ty == 0) d[0][tx + 1] = (row > 0 && col < N) ? dist[(row - 1) * N + col] : INF;
    if (ty == TILE - 1) d[TILE + 1][tx + 1] = (row + 1 < M && col < N) ? dist[(row + 1) * N + col] : INF;
    if (tx == 0) d[ty + 1][0] = (col > 0 && row < M) ? dist[row * N + col - 1] : INF;
    if (tx == TILE - 1) d[ty + 1][TILE + 1] = (col + 1 < N && row < M) ? dist[row * N + col + 1] : INF;
    __syncthreads();

    // Relax inside the tile until nothing changes (Jacobi: all read, then all write).
    int changed = 0, any;
    do {
        const float here = d[ty + 1][tx + 1];
        const float best = fminf(fminf(d[ty][tx + 1], d[ty + 2][tx + 1]), fminf(d[ty + 1][tx], d[ty + 1][tx + 2]));
        const float cand = best + c[ty][tx];
        __syncthreads();
        const int better = inside && cand < here;
        if (better)
            d[ty + 1][tx + 1] = cand;
        any = __syncthreads_or(better);
        changed |= any;
    } while (any);

    if (changed) {
        if (inside)
            dist[row * N + col] = d[ty + 1][tx + 1];
        if (tx == 0 && ty == 0) {
            stamp[by * tilesX + bx] = round;
            *last_round = round;
        }
    }
}

__global__ void sssp_path(int M, int N, const float* C, const float* dist, int source, int target,
                          int* path, int max_len, int* length)
{
    const int lane = threadIdx.x;
    const float INF = __int_as_float(0x7f800000);
    int v = target, len = 0;
    bool ok = dist[target] < INF;
    while (ok) {
        if (lane == 0) path[len] = v;
        ++len;
        if (v == source)
            break;
        // Lane i < 4 looks at neighbour i (up, down, left, right).
        const int r = v / N, col = v % N;
        int u = -1;
        float du = INF;
        if (lane < 4) {
            const int nr = r + (lane == 0 ? -1 : lane == 1 ? 1 : 0);
            const int nc = col + (lane == 2 ? -1 : lane == 3 ? 1 : 0);
            if (nr >= 0 && nr < M && nc >= 0 && nc < N) {
                u = nr * N + nc;
                du = dist[u];
            }
        }
        // Smallest distance among the 4 (ties to the smaller index), into lane 0.
        for (int offset = 2; offset > 0; offset >>= 1) {
            const float od = __shfl_down_sync(0xffffffffu, du, offset);
            const int ou = __shfl_down_sync(0xffffffffu, u, offset);
            if (ou >= 0 && (u < 0 || od < du || (od == du && ou < u))) { du = od; u = ou; }
        }
        v = __shfl_sync(0xffffffffu, u, 0);
        ok = v >= 0 && len < max_len;
    }
    // Reverse in place, source first.
    __syncwarp();
    for (int i = lane; i < len / 2; i += 32) {
        const int a = path[i];
        path[i] = path[len - 1 - i];
        path[len - 1 - i] = a;
    }
    if (lane == 0)
        *length = ok ? len : -len;      // negative: the walk got lost (no predecessor, or too long)
}
