fn main() {
    for (a,b,x) in [(2.0,0.5,0.01f64),(2.0,0.5,0.0001),(2.0,0.5,0.3),(15.0,0.5,0.2),(2.5,0.5,1e-6)] {
        println!("{:e}", statrs::function::beta::beta_reg(a,b,x));
    }
}
