/* Linked against a library that is removed afterwards: the dynamic loader refuses to start it. */
extern int gpu_kernel_launch(int);
int main(void) { return gpu_kernel_launch(1); }
