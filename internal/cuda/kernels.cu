// Kernels of the CUDA tower (package cuda), compiled to PTX for sm_90 by gen_ptx.sh:
//   nvcc --ptx -arch=sm_90 -O3 -o kernels.ptx kernels.cu
// act: 0 none, 1 tanh, 2 ReLU.

extern "C" __global__ void bias_act(float *y, const float *b, int rows, int cols, int act)
{
	long long n = (long long)rows * cols;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
	     i += (long long)gridDim.x * blockDim.x) {
		float v = y[i] + b[i % cols];
		if (act == 1)
			v = tanhf(v);
		else if (act == 2)
			v = v > 0.f ? v : 0.f;
		y[i] = v;
	}
}

// act_grad multiplies dz by the activation's derivative, read off its output y:
// tanh' = 1 − y², ReLU' = [y > 0].
extern "C" __global__ void act_grad(float *dz, const float *y, int n, int act)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		float v = y[i];
		if (act == 1)
			dz[i] *= 1.f - v * v;
		else if (act == 2)
			dz[i] = v > 0.f ? dz[i] : 0.f;
	}
}
