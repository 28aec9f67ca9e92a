! Fortran jobs for the f7r- tuning cases: a small solver that stops at a gfortran runtime
! error, a missing restart file, an ALLOCATE too large, a write through an unassociated
! pointer (rules fortran_* in classify/rules.yaml). Built with -g -fcheck=bounds.
! Usage: f7f MODE [ARG]
program f7_jobs
  implicit none
  character(len=32) :: mode
  character(len=256) :: arg
  real(8), allocatable :: u(:), big(:)
  real(8), pointer :: halo(:) => null()
  integer :: i, n, nsteps
  integer(8) :: nbig

  call get_command_argument(1, mode)
  call get_command_argument(2, arg)
  print '(a,a)', ' solver: mode ', trim(mode)
  n = 100
  allocate(u(n))
  u = 0d0
  select case (trim(mode))
  case ('stencil')   ! the stencil reads one cell past the grid's end
    do nsteps = 1, 3
      do i = 2, n
        u(i) = 0.5d0 * (u(i - 1) + u(i + nsteps - 1))
      end do
      print '(a,i0)', ' step ', nsteps
    end do
  case ('restart')   ! the restart file the run continues from is not there
    open(unit=20, file=trim(arg), status='old', form='unformatted', access='stream')
    read(20) u
    close(20)
  case ('params')    ! a namelist-free parameter file with a word where a count belongs
    open(unit=21, file=trim(arg), status='replace')
    write(21, '(a)') 'steps: forty'
    close(21)
    open(unit=21, file=trim(arg), status='old')
    read(21, *) nsteps
    close(21)
  case ('workspace') ! a workspace the size of the full 3-D grid
    read(arg, *) nbig
    print '(a,i0,a)', ' allocating ', nbig, ' doubles'
    allocate(big(nbig))
    big(1) = 1d0
    print *, big(1)
  case ('halo')      ! the halo buffer was never associated
    do i = 1, n
      halo(i) = u(i)
    end do
    print *, halo(1)
  case ('diverge')   ! the solver's own stop on divergence
    error stop 'residual diverged at step 40'
  end select
  print '(a)', ' solver done'
end program f7_jobs
